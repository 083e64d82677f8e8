// A small client of the NATS protocol over WebSocket, written for the player demo page: CONNECT,
// PING/PONG, SUB/UNSUB, PUB/HPUB, MSG/HMSG, request/reply with one wildcard inbox and "no
// responders" (status 503), reconnection with the subscriptions made again, and a user's
// credentials (a .creds file: its JWT, and its nkey seed signing the server's nonce with
// WebCrypto's Ed25519; replies under _INBOX.<the JWT's name>, as tickfence's roles require).
// Nothing else (no JetStream). The protocol: https://docs.nats.io/reference/reference-protocols/nats-protocol
// Frames of the server arrive as binary WebSocket messages that may split or join protocol lines
// anywhere, so bytes are buffered and parsed by length.

const enc = new TextEncoder();
const dec = new TextDecoder();
const CRLF = enc.encode("\r\n");

function randomToken(n) {
  const b = new Uint8Array(n);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

function indexOfCRLF(buf, from) {
  for (let i = from; i + 1 < buf.length; i++) {
    if (buf[i] === 13 && buf[i + 1] === 10) return i;
  }
  return -1;
}

// parseHeaders reads a NATS header block: "NATS/1.0[ status[ description]]\r\nKey: value\r\n…\r\n".
// Keys are kept in lower case (NATS header names are not case-sensitive for this page's use).
function parseHeaders(bytes) {
  const lines = dec.decode(bytes).split("\r\n");
  const first = lines.shift() || "";
  const m = /^NATS\/1\.0(?:\s+(\d{3}))?(?:\s+(.*))?$/.exec(first);
  const headers = new Map();
  for (const l of lines) {
    const i = l.indexOf(":");
    if (i <= 0) continue;
    const k = l.slice(0, i).trim().toLowerCase();
    const v = l.slice(i + 1).trim();
    if (!headers.has(k)) headers.set(k, v);
  }
  return { headers, status: m && m[1] ? Number(m[1]) : 0, description: (m && m[2]) || "" };
}

function encodeHeaders(h) {
  let s = "NATS/1.0\r\n";
  for (const [k, v] of Object.entries(h || {})) {
    if (/[\r\n:]/.test(k) || /[\r\n]/.test(String(v))) throw new Error(`bad header ${k}`);
    s += `${k}: ${v}\r\n`;
  }
  return enc.encode(s + "\r\n");
}

// ---- credentials ----

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

function base32Decode(s) {
  const out = [];
  let bits = 0, value = 0;
  for (const ch of s) {
    const v = B32.indexOf(ch);
    if (v < 0) throw new Error("not base32");
    value = (value << 5) | v;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return new Uint8Array(out);
}

const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const unb64url = (s) => atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));

// parseCreds reads a NATS .creds file (tickctl auth user): {jwt, seed, name, tags}, name being
// the JWT's, which names the user's inbox (and, for a player's credential, the player). It throws
// on anything else.
export function parseCreds(text) {
  const jwt = /-{3,}BEGIN NATS USER JWT-{3,}\s*([A-Za-z0-9_.=-]+)\s*-{3,}END/.exec(text);
  const seed = /-{3,}BEGIN USER NKEY SEED-{3,}\s*(SU[A-Z2-7]+)\s*-{3,}END/.exec(text);
  if (!jwt || !seed) throw new Error("not a user credentials file (.creds): it needs a NATS USER JWT and a USER NKEY SEED block");
  let claims;
  try {
    claims = JSON.parse(unb64url(jwt[1].split(".")[1]));
  } catch (e) {
    throw new Error("the credentials' JWT cannot be read");
  }
  return { jwt: jwt[1], seed: seed[1], name: claims.name || "", tags: (claims.nats && claims.nats.tags) || [] };
}

// signNonce signs the server's nonce with the seed's ed25519 key, as nats.go does
// (base64url, no padding). A seed is 2 bytes of prefix, the 32-byte key and a CRC16.
async function signNonce(seed, nonce) {
  if (!crypto.subtle) throw new Error("this page is not in a secure context (open it on https, 127.0.0.1 or localhost): WebCrypto cannot sign");
  const raw = base32Decode(seed).subarray(2, 34);
  const pkcs8 = concat(new Uint8Array([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]), raw);
  const key = await crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, false, ["sign"]);
  return b64url(new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, key, enc.encode(nonce))));
}

export class Conn {
  // url: ws:// or wss:// of the server's WebSocket listener. onStatus(state, detail) is told
  // "connecting", "connected", "disconnected" (and why), every time it changes.
  // creds: the text of a .creds file, or "" for none.
  constructor(url, { name = "tickfence player page", onStatus = () => {}, creds = "" } = {}) {
    this.url = url;
    this.creds = creds ? parseCreds(creds) : null;
    this.name = name;
    this.onStatus = onStatus;
    this.subs = new Map(); // sid → {subject, cb}
    this.nextSid = 1;
    // A user of tickfence's roles may receive replies under _INBOX.<its name> only.
    this.inbox = this.creds && this.creds.name ? `_INBOX.${this.creds.name}.${randomToken(8)}` : `_INBOX.${randomToken(10)}`;
    this.pending = new Map(); // inbox token → {resolve, reject, timer}
    this.nextReq = 1;
    this.buf = new Uint8Array(0);
    this.ws = null;
    this.connected = false;
    this.closed = false;
    this.backoff = 250;
    this.waitingPongs = [];
    this.server = null; // the server's INFO
    this.reconnects = 0;
  }

  // connect resolves once the server answered the first PING after CONNECT; afterwards the
  // connection comes back by itself whenever it drops.
  connect() {
    return new Promise((resolve, reject) => {
      this.firstConnect = { resolve, reject };
      this.open();
    });
  }

  open() {
    if (this.closed) return;
    this.onStatus("connecting", this.lastError ? `${this.url} (last attempt: ${this.lastError})` : this.url);
    this.buf = new Uint8Array(0);
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (e) {
      this.fail(e);
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
    };
    ws.onmessage = (ev) => {
      const chunk = typeof ev.data === "string" ? enc.encode(ev.data) : new Uint8Array(ev.data);
      this.buf = this.buf.length ? concat(this.buf, chunk) : chunk;
      try {
        this.parse();
      } catch (e) {
        console.warn("NATS protocol error", e);
        ws.close();
      }
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      if (!opened) {
        // The browser does not say why a handshake failed: the server is down, or it refuses
        // this page's origin (a 403: tickd server --websocket-origin, tickd --nats-websocket-origin).
        this.lost(`cannot open ${this.url}: is the server up, and does it accept pages from ${location.origin}?`);
        return;
      }
      this.lost(ev.reason || `socket closed (code ${ev.code})`);
    };
    ws.onerror = () => {}; // onclose follows and says it
  }

  fail(e) {
    this.lost(String(e && e.message ? e.message : e));
  }

  // lost: the socket is gone. Requests in flight fail (their senders retry with the same
  // request ID); subscriptions stay and are made again on the next connection.
  lost(why) {
    const wasConnected = this.connected;
    this.connected = false;
    this.ws = null;
    clearInterval(this.pinger);
    this.waitingPongs = [];
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new Error("disconnected"));
    }
    this.pending.clear();
    if (this.closed) return;
    this.lastError = why;
    this.onStatus("disconnected", why);
    if (wasConnected) this.backoff = 250;
    setTimeout(() => this.open(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, 4000);
  }

  send(bytes) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error("disconnected");
    this.ws.send(bytes);
  }

  sendLine(s) {
    this.send(enc.encode(s + "\r\n"));
  }

  // ping resolves on the server's PONG (the PONGs come back in order).
  ping() {
    return new Promise((resolve) => {
      this.waitingPongs.push(resolve);
      this.sendLine("PING");
    });
  }

  // refuse gives up for good: the server will not take this page as it is.
  refuse(why) {
    this.closed = true;
    if (this.firstConnect) {
      this.firstConnect.reject(new Error(why));
      this.firstConnect = null;
    }
    this.onStatus("refused", why);
    if (this.ws) this.ws.close();
  }

  async onInfo(info) {
    const first = this.server === null;
    this.server = info;
    if (!first && this.connected) return; // a cluster update
    const connect = {
      verbose: false, pedantic: false, headers: true, no_responders: true, lang: "js-tickfence-page",
      version: "1", protocol: 1, name: this.name,
    };
    if (this.creds) {
      connect.jwt = this.creds.jwt;
      if (info.nonce) connect.sig = await signNonce(this.creds.seed, info.nonce);
    } else if (info.auth_required) {
      this.refuse("the server requires credentials (it runs with --auth): give the page a gateway's .creds");
      return;
    }
    this.sendLine("CONNECT " + JSON.stringify(connect));
    this.sendLine(`SUB ${this.inbox}.* 0`); // sid 0: every reply
    for (const [sid, s] of this.subs) this.sendLine(`SUB ${s.subject} ${sid}`);
    this.ping().then(() => {
      this.connected = true;
      this.lastError = "";
      if (this.firstConnect) {
        this.firstConnect.resolve();
        this.firstConnect = null;
      } else {
        this.reconnects++;
      }
      this.onStatus("connected", this.url);
      // A server that stops answering (its machine gone without a FIN) is noticed within ~10 s.
      clearInterval(this.pinger);
      this.pinger = setInterval(() => {
        if (this.waitingPongs.length >= 2) {
          if (this.ws) this.ws.close();
          return;
        }
        try {
          this.ping();
        } catch (e) {}
      }, 5000);
    });
  }

  // parse consumes every complete protocol message in the buffer.
  parse() {
    let pos = 0;
    for (;;) {
      const eol = indexOfCRLF(this.buf, pos);
      if (eol < 0) break;
      const line = dec.decode(this.buf.subarray(pos, eol));
      const sp = line.indexOf(" ");
      const op = (sp < 0 ? line : line.slice(0, sp)).toUpperCase();
      if (op === "MSG" || op === "HMSG") {
        const args = line.slice(sp + 1).trim().split(/\s+/);
        const total = Number(args[args.length - 1]);
        const hdrLen = op === "HMSG" ? Number(args[args.length - 2]) : 0;
        const fixed = op === "HMSG" ? 4 : 3;
        const reply = args.length > fixed ? args[2] : "";
        const start = eol + 2;
        if (this.buf.length < start + total + 2) break; // the payload has not all arrived
        const body = this.buf.subarray(start, start + total);
        let headers = new Map(), status = 0, description = "";
        if (hdrLen > 0) ({ headers, status, description } = parseHeaders(body.subarray(0, hdrLen)));
        const msg = { subject: args[0], sid: Number(args[1]), reply, headers, status, description, data: body.slice(hdrLen) };
        pos = start + total + 2;
        this.deliver(msg);
        continue;
      }
      pos = eol + 2;
      switch (op) {
        case "PING":
          this.sendLine("PONG");
          break;
        case "PONG": {
          const r = this.waitingPongs.shift();
          if (r) r();
          break;
        }
        case "INFO":
          this.onInfo(JSON.parse(line.slice(sp + 1))).catch((e) => this.refuse(e.message));
          break;
        case "+OK":
          break;
        case "-ERR":
          console.warn("NATS server:", line);
          if (/authorization|authentication/i.test(line)) {
            this.refuse(`the server refused the page: ${line.slice(5)}${this.creds ? " (are these the credentials of this server's gateway?)" : ""}`);
          } else if (/permissions violation/i.test(line)) {
            console.warn(`refused by the server's permissions: ${line}`);
          }
          break;
        default:
          throw new Error(`unexpected ${line.slice(0, 60)}`);
      }
    }
    this.buf = this.buf.slice(pos);
  }

  deliver(msg) {
    if (msg.sid === 0) {
      const token = msg.subject.slice(this.inbox.length + 1);
      const p = this.pending.get(token);
      if (!p) return; // a late answer to a request already given up
      this.pending.delete(token);
      clearTimeout(p.timer);
      if (msg.status === 503) p.reject(new Error("no responders"));
      else p.resolve(msg);
      return;
    }
    const s = this.subs.get(msg.sid);
    if (s) s.cb(msg);
  }

  // subscribe calls cb({subject, reply, headers, data}) for every message on subject (wildcards
  // allowed) until the returned object's unsubscribe().
  subscribe(subject, cb) {
    const sid = this.nextSid++;
    this.subs.set(sid, { subject, cb });
    if (this.connected) this.sendLine(`SUB ${subject} ${sid}`);
    return {
      unsubscribe: () => {
        if (!this.subs.delete(sid)) return;
        if (this.connected) {
          try {
            this.sendLine(`UNSUB ${sid}`);
          } catch (e) {}
        }
      },
    };
  }

  // publish sends data (a string or bytes) with optional headers ({name: value}) and reply subject.
  publish(subject, data, { headers = null, reply = "" } = {}) {
    const payload = typeof data === "string" ? enc.encode(data) : data || new Uint8Array(0);
    const r = reply ? ` ${reply}` : "";
    if (headers) {
      const h = encodeHeaders(headers);
      const line = enc.encode(`HPUB ${subject}${r} ${h.length} ${h.length + payload.length}\r\n`);
      this.send(concat(concat(concat(line, h), payload), CRLF));
    } else {
      this.send(concat(concat(enc.encode(`PUB ${subject}${r} ${payload.length}\r\n`), payload), CRLF));
    }
  }

  // request publishes and resolves with the first reply; it rejects with "timeout", "no
  // responders" (nobody subscribes to subject now) or "disconnected".
  request(subject, data, { headers = null, timeout = 2000 } = {}) {
    return new Promise((resolve, reject) => {
      if (!this.connected) {
        reject(new Error("disconnected"));
        return;
      }
      const token = String(this.nextReq++);
      const timer = setTimeout(() => {
        this.pending.delete(token);
        reject(new Error("timeout"));
      }, timeout);
      this.pending.set(token, { resolve, reject, timer });
      try {
        this.publish(subject, data, { headers, reply: `${this.inbox}.${token}` });
      } catch (e) {
        clearTimeout(timer);
        this.pending.delete(token);
        reject(e);
      }
    });
  }

  close() {
    this.closed = true;
    clearInterval(this.pinger);
    if (this.ws) this.ws.close();
  }
}
