// Package wire is the command format of DESIGN.md section 5, the contract with gateways written in
// any language: subject tickfence.cmd.<S>.<instanceID>, header Tickfence-Request-Id, a msgpack (or
// JSON) map body, and a reply {"ok":true,"result":…} or {"ok":false,"error":{"code","message"}}.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/mpscan"
	"github.com/tickfence/tickfence/store"
)

// Protocol names.
const (
	SubjectPrefix   = "tickfence.cmd"
	HeaderRequestID = "Tickfence-Request-Id"
	// The compact form (client sessions): instead of a request ID, a client ID, the command's
	// sequence number to this instance (1, 2, 3…) and the client's ack (it has every answer up to
	// that number from this instance; optional, default 0, below the sequence number).
	//
	// An acknowledgement alone (no command): the client ID and the ack, no sequence number and no
	// body, published without a reply subject. A client sends one when it has nothing left in
	// flight to an instance, so that the owner drops the answers it kept and the session holds
	// nothing: a session holding no answer gives its place to a new client (store.MaxClientSessions).
	HeaderClient  = "Tickfence-Client"
	HeaderSeq     = "Tickfence-Seq"
	HeaderAck     = "Tickfence-Ack"
	HeaderContent = "Content-Type"
	// HeaderWatch marks a watcher's interest in an instance: a message on one of its command
	// subjects with this header (any value), no body and no reply subject. It is no command: the
	// owner answers nothing and the game never sees it; it keeps the instance from being
	// passivated (actor.KindOptions.Passivate) for that long, and wakes a passivated one. A
	// watcher sends one when it starts and every InterestEvery while it watches.
	HeaderWatch  = "Tickfence-Watch"
	ContentJSON  = "application/json"
	MaxRequestID = 64
)

// InterestEvery is how often a watcher says its interest (HeaderWatch) while it watches.
const InterestEvery = 10 * time.Second

// InterestAlone reports a watcher's interest: HeaderWatch, no body, no reply subject.
func InterestAlone(watch, reply string, data []byte) bool {
	return watch != "" && reply == "" && len(data) == 0
}

// Error codes of a reply.
const (
	CodeBadRequest      = "bad_request"
	CodeTooLarge        = "too_large"
	CodeUnknownInstance = "unknown_instance"
	CodeRequestIDReused = "request_id_reused"
	CodeNotOwner        = "not_owner"
	CodeInternal        = "internal"
	// CodeRetry: the owner could not commit the command (its shard is being rebuilt or moved);
	// this attempt certainly had no effect. Retry with the same request ID.
	CodeRetry = "retry"
	// CodeUnknownOutcome: the owner cannot tell whether the command was applied: the write that
	// held it was sent and its outcome is unknown (an acknowledgement lost, a timeout), or its
	// instance stopped while it was in flight. It is no failure: retransmit the same request (same
	// ID, or same session number) to learn it — the answer is then its first answer if it was
	// applied, or it is applied then.
	CodeUnknownOutcome = "unknown_outcome"
	// CodeAnswerForgotten: a retransmission of a command that was applied, whose answer the
	// instance no longer keeps: it let go of the client's session, which held the answer, to make
	// room for other clients (store.MaxClientSessions) while the client was silent. The command
	// is never applied again. Not retryable: the outcome is known (applied), the result is not.
	CodeAnswerForgotten = "answer_forgotten"
	// CodeExists: create of an instance that already exists.
	CodeExists = "already_exists"
	// CodeRejected: the game refused the command (its own rules). Games may use other codes.
	CodeRejected = "rejected"
	// CodeBusy: the node is past its capacity and refused the command at once, without effect.
	// Retry with the same request ID (or sequence number) after a backoff with jitter.
	CodeBusy = "busy"
	// CodeForbidden: the sender may not do this (DESIGN 9): a player ending an instance it did
	// not create, creating one of a kind that does not let players create, or the game's own
	// authorisation. Not retryable.
	CodeForbidden = "forbidden"
	// CodeRateLimited: the sender is past one of its quotas (commands per second, instances
	// created); nothing was applied. Retry with the same request after the delay the message says.
	CodeRateLimited = "rate_limited"
	// CodeInstanceFailed: the instance is out of service on its owner because the game's code
	// failed in it — a panic in Handle or Tick, a state its Kind cannot Restore, a kind this node
	// does not know, an effect it could not store; the message says which. This attempt changed
	// nothing (its stored state stays as it was). Not retryable: the instance stays failed until
	// an operator reloads it (tickctl instance reload) once the game is fixed, or its shard moves.
	CodeInstanceFailed = "instance_failed"
)

// Subject is where commands to an instance are sent.
func Subject(shard uint32, id string) string {
	return SubjectPrefix + "." + strconv.FormatUint(uint64(shard), 10) + "." + id
}

// PlayerPrefix is where players send commands (DESIGN 9): tickfence.play.<S>.<instanceID>.<player>.
// A player's credential may publish only under its own name (package auth), so the last token
// is the server's word for who sent it; tickfence.cmd.> is for trusted senders only.
const PlayerPrefix = "tickfence.play"

// PlayerSubject is where player sends commands to an instance.
func PlayerSubject(shard uint32, id, player string) string {
	return PlayerPrefix + "." + strconv.FormatUint(uint64(shard), 10) + "." + id + "." + player
}

// PlayerShardSubject is what the owner of a shard subscribes to for players' commands.
func PlayerShardSubject(shard uint32) string {
	return PlayerPrefix + "." + strconv.FormatUint(uint64(shard), 10) + ".>"
}

// ParsePlayerSubject splits tickfence.play.<S>.<id>.<player>: the command subject it stands for
// (tickfence.cmd.<S>.<id>) and the player.
func ParsePlayerSubject(subject string) (cmdSubject, player string, err error) {
	rest, ok := strings.CutPrefix(subject, PlayerPrefix+".")
	i := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 {
		return "", "", Errorf(CodeBadRequest, "subject %q: want %s.<shard>.<instance>.<player>", subject, PlayerPrefix)
	}
	return SubjectPrefix + "." + rest[:i], rest[i+1:], nil
}

// OperatorPrefix is where operators send requests to the owner of an instance's shard (DESIGN 9:
// only an operator's credential may publish there, and the players' account does not import it):
// tickfence.op.<S>.<instanceID>, body {"type":"reload"}, the headers and reply of a command. The
// owner answers them itself; they never reach the game.
const OperatorPrefix = "tickfence.op"

// OperatorSubject is where an operator's request about an instance is sent.
func OperatorSubject(shard uint32, id string) string {
	return OperatorPrefix + "." + strconv.FormatUint(uint64(shard), 10) + "." + id
}

// OperatorShardSubject is what the owner of a shard subscribes to for operators' requests.
func OperatorShardSubject(shard uint32) string {
	return OperatorPrefix + "." + strconv.FormatUint(uint64(shard), 10) + ".>"
}

// ParseOperatorSubject maps tickfence.op.<S>.<id> to the command subject it stands for
// (tickfence.cmd.<S>.<id>), which ParseSubject checks.
func ParseOperatorSubject(subject string) (cmdSubject string, err error) {
	rest, ok := strings.CutPrefix(subject, OperatorPrefix+".")
	if !ok {
		return "", Errorf(CodeBadRequest, "subject %q: want %s.<shard>.<instance>", subject, OperatorPrefix)
	}
	return SubjectPrefix + "." + rest, nil
}

// ShardSubject is what the owner of a shard subscribes to: ">" so that a malformed instance ID
// (one with dots) still reaches the owner and gets a clear error instead of silence.
func ShardSubject(shard uint32) string {
	return SubjectPrefix + "." + strconv.FormatUint(uint64(shard), 10) + ".>"
}

// Request is a decoded, validated command.
type Request struct {
	ID string // request ID (the opaque form); empty in the compact form
	// Client, Seq and Ack: the compact form (Client not empty).
	Client   string
	Seq, Ack uint64
	Shard    uint32
	Instance string
	Type     string
	// Body is the command as canonical msgpack (map keys sorted); the same command sent as JSON or
	// msgpack has the same Body.
	Body []byte
	// Fingerprint identifies the payload: the same request ID with another fingerprint is refused.
	Fingerprint uint64
	// JSON: answer in JSON.
	JSON bool
}

// Error is a reply's error.
type Error struct {
	Code    string `msgpack:"code" json:"code"`
	Message string `msgpack:"message" json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf makes a protocol error.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Reply is the answer to a command.
type Reply struct {
	OK bool `msgpack:"ok" json:"ok"`
	// Result is the game's answer; only a nil one is left out of the encoding (a zero or empty
	// result — 0, false, "", an empty list — is sent as it is: EncodeMsgpack).
	Result any    `msgpack:"result,omitempty" json:"result,omitempty"`
	Error  *Error `msgpack:"error,omitempty" json:"error,omitempty"`
}

// EncodeMsgpack writes r as a map of its fields in order, leaving out a nil result or error
// (msgpack's omitempty would leave out a zero or empty result too).
func (r Reply) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 1
	if r.Result != nil {
		n++
	}
	if r.Error != nil {
		n++
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if err := enc.EncodeString("ok"); err != nil {
		return err
	}
	if err := enc.EncodeBool(r.OK); err != nil {
		return err
	}
	if r.Result != nil {
		if err := enc.EncodeString("result"); err != nil {
			return err
		}
		if err := enc.Encode(r.Result); err != nil {
			return err
		}
	}
	if r.Error != nil {
		if err := enc.EncodeString("error"); err != nil {
			return err
		}
		return enc.Encode(r.Error)
	}
	return nil
}

// ParseSubject splits tickfence.cmd.<S>.<id> and checks both parts.
func ParseSubject(subject string, shards uint32) (uint32, string, error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return 0, "", Errorf(CodeBadRequest, "subject %q is not under %s", subject, SubjectPrefix)
	}
	s, id, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", Errorf(CodeBadRequest, "subject %q: want %s.<shard>.<instance>", subject, SubjectPrefix)
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || uint32(n) >= shards {
		return 0, "", Errorf(CodeBadRequest, "subject %q: shard %q is not in 0..%d", subject, s, shards-1)
	}
	if err := store.ValidID(id); err != nil {
		return 0, "", Errorf(CodeBadRequest, "%v", err)
	}
	if want := store.ShardOf(id, shards); want != uint32(n) {
		return 0, "", Errorf(CodeBadRequest, "instance %s belongs to shard %d, not %d", id, want, n)
	}
	return uint32(n), id, nil
}

// Key names the request in logs and errors: its ID, or client/seq.
func (r *Request) Key() string {
	if r.Client != "" {
		return r.Client + "/" + strconv.FormatUint(r.Seq, 10)
	}
	return r.ID
}

// AckOnly reports an acknowledgement alone (HeaderAck without HeaderSeq or a body): no command.
func (r *Request) AckOnly() bool { return r.Client != "" && r.Seq == 0 }

// AckAlone reports a message that is an acknowledgement alone: the client ID and the ack, no
// sequence number and no body (see HeaderClient).
func AckAlone(h Headers, data []byte) bool {
	return h.Client != "" && h.Seq == "" && h.Ack != "" && len(data) == 0
}

// Headers are the identifying headers of a command.
type Headers struct {
	RequestID, Client, Seq, Ack, ContentType string
}

func checkToken(name, v string) error {
	if v == "" || len(v) > MaxRequestID {
		return Errorf(CodeBadRequest, "header %s must be 1..%d characters", name, MaxRequestID)
	}
	for _, c := range []byte(v) {
		if c < 0x21 || c > 0x7e {
			return Errorf(CodeBadRequest, "header %s must be printable ASCII without spaces", name)
		}
	}
	return nil
}

// DecodeCommand validates and decodes a command in either form. Errors are *Error with a code
// for the reply.
func DecodeCommand(subject string, h Headers, data []byte, shards uint32) (Request, error) {
	if h.Client == "" && h.Seq == "" && h.Ack == "" {
		return DecodeRequest(subject, h.RequestID, h.ContentType, data, shards)
	}
	bad := Request{JSON: strings.HasPrefix(h.ContentType, ContentJSON)} // answered in the client's encoding
	if h.RequestID != "" {
		return bad, Errorf(CodeBadRequest, "header %s and the session headers (%s, %s) exclude each other", HeaderRequestID, HeaderClient, HeaderSeq)
	}
	if err := checkToken(HeaderClient, h.Client); err != nil {
		return bad, err
	}
	if AckAlone(h, data) {
		ack, err := strconv.ParseUint(h.Ack, 10, 64)
		if err != nil || ack == 0 {
			return bad, Errorf(CodeBadRequest, "header %s must be a decimal number from 1", HeaderAck)
		}
		if bad.Shard, bad.Instance, err = ParseSubject(subject, shards); err != nil {
			return bad, err
		}
		bad.Client, bad.Ack = h.Client, ack
		return bad, nil
	}
	seq, err := strconv.ParseUint(h.Seq, 10, 64)
	if err != nil || seq == 0 {
		return bad, Errorf(CodeBadRequest, "header %s must be a decimal number from 1", HeaderSeq)
	}
	var ack uint64
	if h.Ack != "" {
		if ack, err = strconv.ParseUint(h.Ack, 10, 64); err != nil || ack >= seq {
			return bad, Errorf(CodeBadRequest, "header %s must be a decimal number below %s (%s)", HeaderAck, HeaderSeq, h.Seq)
		}
	}
	req, err := decodeBody(subject, h.ContentType, data, shards)
	req.Client, req.Seq, req.Ack = h.Client, seq, ack
	return req, err
}

// DecodeRequest validates and decodes a command of the opaque form. Errors are *Error with a
// code for the reply.
func DecodeRequest(subject, requestID, contentType string, data []byte, shards uint32) (Request, error) {
	if err := checkToken(HeaderRequestID, requestID); err != nil {
		return Request{JSON: strings.HasPrefix(contentType, ContentJSON)}, err
	}
	req, err := decodeBody(subject, contentType, data, shards)
	req.ID = requestID
	return req, err
}

func decodeBody(subject, contentType string, data []byte, shards uint32) (Request, error) {
	req := Request{JSON: strings.HasPrefix(contentType, ContentJSON)}
	if len(data) > store.MaxCommandBytes {
		return req, Errorf(CodeTooLarge, "command is %d bytes, limit %d", len(data), store.MaxCommandBytes)
	}
	var err error
	if req.Shard, req.Instance, err = ParseSubject(subject, shards); err != nil {
		return req, err
	}
	if !req.JSON {
		if t, ok := canonicalCommand(data); ok { // what Canonical(decode(data)) would give
			req.Type, req.Body = t, bytes.Clone(data)
			req.Fingerprint = Fingerprint(req.Body)
			return req, nil
		}
	}
	m, err := decodeMap(data, req.JSON)
	if err != nil {
		return req, err
	}
	t, ok := m["type"].(string)
	if !ok || t == "" {
		return req, Errorf(CodeBadRequest, `command needs a string "type"`)
	}
	req.Type = t
	if req.Body, err = Canonical(m); err != nil {
		return req, Errorf(CodeBadRequest, "command: %v", err)
	}
	req.Fingerprint = Fingerprint(req.Body)
	return req, nil
}

func decodeMap(data []byte, isJSON bool) (map[string]any, error) {
	var v any
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, Errorf(CodeBadRequest, "malformed JSON: %v", err)
		}
		// Only white space may follow the value: dec.More is false before a stray } or ], which
		// a stricter parser in front (a gateway's) would refuse.
		if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
			return nil, Errorf(CodeBadRequest, "malformed JSON: trailing data after the command")
		}
		if k, ok := jsonRepeatedKey(data); ok { // encoding/json kept the last
			return nil, repeatedKey(k)
		}
		v = fromJSON(v)
	} else {
		if err := checkMsgpack(data); err != nil { // well-formed, no key repeated
			return nil, err
		}
		if err := msgpack.Unmarshal(data, &v); err != nil {
			return nil, Errorf(CodeBadRequest, "malformed msgpack: %v", err)
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, Errorf(CodeBadRequest, "command must be a map with string keys, got %T", v)
	}
	return m, nil
}

// fromJSON turns json.Numbers into int64 when integral, float64 otherwise.
func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = fromJSON(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromJSON(e)
		}
	}
	return v
}

// Fingerprint hashes a canonical body.
func Fingerprint(body []byte) uint64 {
	h := fnv.New64a()
	h.Write(body)
	return h.Sum64()
}

// EncodeReply encodes a reply as msgpack (the form kept in instance records).
func EncodeReply(r Reply) []byte {
	b, err := Canonical(r)
	if err != nil {
		b, _ = Canonical(Reply{Error: Errorf(CodeInternal, "encode result: %v", err)})
	}
	return b
}

// ForClient re-encodes a msgpack reply for a request: unchanged for msgpack, JSON for JSON.
func ForClient(reply []byte, asJSON bool) []byte {
	if !asJSON {
		return reply
	}
	var v any
	if err := msgpack.Unmarshal(reply, &v); err != nil {
		v = Reply{Error: Errorf(CodeInternal, "stored reply unreadable: %v", err)}
	}
	b, err := json.Marshal(jsonable(v))
	if err != nil {
		b, _ = json.Marshal(Reply{Error: Errorf(CodeInternal, "reply not JSON-encodable: %v", err)})
	}
	return b
}

// MsgpackToJSON re-encodes a msgpack value (a frame's payload, a stored answer) as JSON, maps
// with non-string keys included.
func MsgpackToJSON(b []byte) ([]byte, error) {
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(jsonable(v))
}

// jsonable converts map[any]any from msgpack into JSON-encodable maps.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
	}
	return v
}

// DecodeReply decodes a reply in either encoding. Its Result is in Go's own types with every
// number an int64 (uint64 above math.MaxInt64) or a float64, whatever width msgpack gave it or
// whichever encoding carried it (Normalize): a result of 5 is int64(5) in both.
func DecodeReply(b []byte, isJSON bool) (Reply, error) {
	var r rawReply
	if err := decodeReply(b, isJSON, &r); err != nil {
		return Reply{}, err
	}
	if !r.OK && r.Error == nil {
		return Reply{}, errors.New("malformed reply: not ok and no error")
	}
	out := Reply{OK: r.OK, Error: r.Error}
	var err error
	switch {
	case isJSON && len(r.JSON) > 0:
		out.Result, err = decodeJSONValue(r.JSON)
	case !isJSON && len(r.Msgpack) > 0:
		out.Result, err = decodeValue(r.Msgpack) // mpscan.Check passed on the whole reply
	}
	if err != nil {
		return Reply{}, fmt.Errorf("malformed reply: result: %w", err)
	}
	return out, nil
}

// rawReply is a reply whose result is left encoded (in the field of its encoding).
type rawReply struct {
	OK      bool               `msgpack:"ok" json:"ok"`
	Msgpack msgpack.RawMessage `msgpack:"result,omitempty" json:"-"`
	JSON    json.RawMessage    `msgpack:"-" json:"result,omitempty"`
	Error   *Error             `msgpack:"error,omitempty" json:"error,omitempty"`
}

func decodeReply(b []byte, isJSON bool, v any) error {
	var err error
	if isJSON {
		err = json.Unmarshal(b, v)
	} else if err = mpscan.Check(b); err == nil {
		if err = topKeysOnce(b); err == nil {
			err = msgpack.Unmarshal(b, v)
		}
	}
	if err != nil {
		return fmt.Errorf("malformed reply: %w", err)
	}
	return nil
}

// topKeysOnce refuses a msgpack map (well-formed: mpscan.Check passed) that repeats one of a
// reply's own keys (ok, error, result) at its top: msgpack's decoder panics on a repeated "result"
// (an interface field decoded twice), and a reply that says two things is malformed anyway.
// Other keys are ignored by the decoder, repeated or not, and anything else is left to it. The
// fast path of DecodeStatus refuses the same repeats.
func topKeysOnce(b []byte) error {
	n, items, ok := mpscan.MapHeader(b)
	if !ok || items < 2 {
		return nil
	}
	var seen [3]bool
	for range items {
		k, kn, ok := mpscan.Str(b[n:])
		if !ok {
			return nil
		}
		if i := slices.Index(replyKeys[:], string(k)); i >= 0 {
			if seen[i] {
				return fmt.Errorf("key %q twice", k)
			}
			seen[i] = true
		}
		n += kn
		vn, err := mpscan.Len(b[n:], 1)
		if err != nil {
			return err
		}
		n += vn
	}
	return nil
}

var replyKeys = [3]string{"ok", "error", "result"}

// Status is a reply without its result: what a sender needs to decide whether to retry.
type Status struct {
	OK    bool   `msgpack:"ok" json:"ok"`
	Error *Error `msgpack:"error,omitempty" json:"error,omitempty"`
}

// DecodeStatus decodes a reply's status only, skipping the result (cheaper than DecodeReply).
func DecodeStatus(b []byte, isJSON bool) (Status, error) {
	var r Status
	ok := false
	if !isJSON {
		r, ok = status(b)
	}
	if !ok {
		if err := decodeReply(b, isJSON, &r); err != nil {
			return Status{}, err
		}
	}
	if !r.OK && r.Error == nil {
		return Status{}, errors.New("malformed reply: not ok and no error")
	}
	return r, nil
}
