package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

func TestJSONAndMsgpackFingerprintAlike(t *testing.T) {
	subj := wire.Subject(store.ShardOf("d1", 16), "d1")
	mp, err := wire.Canonical(map[string]any{"type": "attack", "player": "p1", "n": 3})
	if err != nil {
		t.Fatal(err)
	}
	a, err := wire.DecodeRequest(subj, "r", "", mp, 16)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.DecodeRequest(subj, "r", wire.ContentJSON, []byte(`{"player":"p1","n":3.0,"type":"attack"}`), 16)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint != b.Fingerprint || string(a.Body) != string(b.Body) || !b.JSON || a.JSON {
		t.Fatalf("msgpack %x (%d) and JSON %x (%d) of one command differ", a.Body, a.Fingerprint, b.Body, b.Fingerprint)
	}
	c, _ := wire.DecodeRequest(subj, "r", wire.ContentJSON, []byte(`{"player":"p2","n":3,"type":"attack"}`), 16)
	if c.Fingerprint == a.Fingerprint {
		t.Fatal("different payloads share a fingerprint")
	}
}

func TestReplyMirrorsEncoding(t *testing.T) {
	r := wire.EncodeReply(wire.Reply{OK: false, Error: wire.Errorf(wire.CodeUnknownInstance, "no %s", "x")})
	if got := string(wire.ForClient(r, true)); got != `{"error":{"code":"unknown_instance","message":"no x"},"ok":false}` {
		t.Fatalf("JSON reply = %s", got)
	}
	back, err := wire.DecodeReply(r, false)
	if err != nil || back.OK || back.Error.Code != wire.CodeUnknownInstance {
		t.Fatalf("decode = %+v, %v", back, err)
	}
}

func TestParseSubject(t *testing.T) {
	id := "demo-7"
	s := store.ShardOf(id, 256)
	if sh, got, err := wire.ParseSubject(wire.Subject(s, id), 256); err != nil || sh != s || got != id {
		t.Fatalf("ParseSubject = %d %q %v", sh, got, err)
	}
	for _, subj := range []string{"other.cmd.1.x", "tickfence.cmd.1", "tickfence.cmd.x.demo-7", "tickfence.cmd.999.demo-7",
		"tickfence.cmd.1.a.b", "tickfence.cmd.1." + strings.Repeat("a", 65), wire.Subject((s+1)%256, id)} {
		var werr *wire.Error
		if _, _, err := wire.ParseSubject(subj, 256); !errors.As(err, &werr) || werr.Code != wire.CodeBadRequest {
			t.Errorf("ParseSubject(%q) = %v, want bad_request", subj, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	subj := wire.Subject(store.ShardOf("d1", 16), "d1")
	good, _ := wire.Canonical(map[string]any{"type": "attack", "player": "p1"})
	f.Add(good, false)
	f.Add([]byte(`{"type":"join","player":"p1"}`), true)
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, false)
	f.Add([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff}, false)
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`), true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		ct := ""
		if isJSON {
			ct = wire.ContentJSON
		}
		req, err := wire.DecodeRequest(subj, "r1", ct, body, 16)
		if err != nil {
			var werr *wire.Error
			if !errors.As(err, &werr) || (werr.Code != wire.CodeBadRequest && werr.Code != wire.CodeTooLarge) {
				t.Fatalf("error without a reply code: %v", err)
			}
			return
		}
		if req.Type == "" || len(req.Body) == 0 {
			t.Fatalf("accepted request without type or body: %+v", req)
		}
		// The canonical body decodes again to the same canonical body.
		again, err := wire.DecodeRequest(subj, "r1", "", req.Body, 16)
		if err != nil || again.Fingerprint != req.Fingerprint {
			t.Fatalf("canonical body does not round-trip: %v", err)
		}
	})
}

func TestSessionHeaders(t *testing.T) {
	subj := wire.Subject(store.ShardOf("d1", 16), "d1")
	body, _ := wire.Canonical(map[string]any{"type": "attack"})
	r, err := wire.DecodeCommand(subj, wire.Headers{Client: "gw-1", Seq: "7", Ack: "5"}, body, 16)
	if err != nil || r.Client != "gw-1" || r.Seq != 7 || r.Ack != 5 || r.ID != "" || r.Key() != "gw-1/7" {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	if r, err := wire.DecodeCommand(subj, wire.Headers{RequestID: "r1"}, body, 16); err != nil || r.ID != "r1" || r.Client != "" {
		t.Fatalf("opaque form: %+v, %v", r, err)
	}
	for _, h := range []wire.Headers{
		{Client: "gw", Seq: "0"},
		{Client: "gw", Seq: "x"},
		{Client: "gw"},
		{Seq: "3"},
		{Client: "has space", Seq: "3"},
		{Client: strings.Repeat("c", 65), Seq: "3"},
		{Client: "gw", Seq: "3", Ack: "3"},
		{Client: "gw", Seq: "3", Ack: "-1"},
		{Client: "gw", Seq: "3", RequestID: "r1"},
		{Client: "gw", Seq: "3", ContentType: wire.ContentJSON},
	} {
		r, err := wire.DecodeCommand(subj, h, body, 16)
		var werr *wire.Error
		if !errors.As(err, &werr) || werr.Code != wire.CodeBadRequest {
			t.Errorf("headers %+v: %+v, %v; want bad_request", h, r, err)
		}
		if h.ContentType == wire.ContentJSON && !r.JSON {
			t.Errorf("headers %+v: the refusal would not be answered in JSON", h)
		}
	}
}
