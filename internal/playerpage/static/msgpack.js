// decode reads one msgpack value (https://github.com/msgpack/msgpack/blob/master/spec.md): what
// the demo dungeon's frames hold (maps, arrays, strings, integers, floats, booleans, nil; binary
// as Uint8Array; extensions are refused). Integers beyond 2^53 lose precision (Number).

const dec = new TextDecoder();

export function decode(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let pos = 0;
  const need = (n) => {
    if (pos + n > bytes.length) throw new Error("msgpack: truncated");
  };
  const u8 = () => (need(1), view.getUint8(pos++));
  const u16 = () => (need(2), (pos += 2), view.getUint16(pos - 2));
  const u32 = () => (need(4), (pos += 4), view.getUint32(pos - 4));
  const str = (n) => (need(n), (pos += n), dec.decode(bytes.subarray(pos - n, pos)));
  const bin = (n) => (need(n), (pos += n), bytes.slice(pos - n, pos));
  const arr = (n) => {
    const a = new Array(n);
    for (let i = 0; i < n; i++) a[i] = value();
    return a;
  };
  const map = (n) => {
    const m = {};
    for (let i = 0; i < n; i++) {
      const k = value();
      m[String(k)] = value();
    }
    return m;
  };
  function value() {
    const b = u8();
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(u8());
      case 0xc5: return bin(u16());
      case 0xc6: return bin(u32());
      case 0xca: need(4); pos += 4; return view.getFloat32(pos - 4);
      case 0xcb: need(8); pos += 8; return view.getFloat64(pos - 8);
      case 0xcc: return u8();
      case 0xcd: return u16();
      case 0xce: return u32();
      case 0xcf: need(8); pos += 8; return Number(view.getBigUint64(pos - 8));
      case 0xd0: need(1); pos += 1; return view.getInt8(pos - 1);
      case 0xd1: need(2); pos += 2; return view.getInt16(pos - 2);
      case 0xd2: need(4); pos += 4; return view.getInt32(pos - 4);
      case 0xd3: need(8); pos += 8; return Number(view.getBigInt64(pos - 8));
      case 0xd9: return str(u8());
      case 0xda: return str(u16());
      case 0xdb: return str(u32());
      case 0xdc: return arr(u16());
      case 0xdd: return arr(u32());
      case 0xde: return map(u16());
      case 0xdf: return map(u32());
      default: throw new Error(`msgpack: type 0x${b.toString(16)} not supported`);
    }
  }
  const v = value();
  if (pos !== bytes.length) throw new Error("msgpack: trailing bytes");
  return v;
}
