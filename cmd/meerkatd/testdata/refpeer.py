#!/usr/bin/env python3
"""A reference-style Meerkat peer for tests, in pure standard-library Python.

It listens on a Unix socket, reads one length-prefixed envelope, checks
that it is addressed to this peer, and verifies its Ed25519 signature
over the canonical CBOR of [id, from, to, kind] -- where kind is rebuilt
from ONLY the fields the Rust reference knows for a message (type, body,
blocks, content_taint, handling_mode, objective_id), as that node would.
A sender that signed any other field fails verification here.

If the signature verifies it answers with a signed ack (kind {type: ack,
in_reply_to: id}) and closes the connection, as the Rust reference does.
It prints one JSON line describing what it received (the body included:
this is a test fixture) and exits.

Usage: refpeer.py SOCKET SEED_HEX SENDER_KEY
  SOCKET      the Unix socket path to listen on
  SEED_HEX    this peer's 32-byte Ed25519 seed, hex
  SENDER_KEY  the key allowed to send, ed25519:BASE64
On start it prints "READY ed25519:BASE64" (its own key) once listening.
"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys

MAX_FRAME = 1 << 20
RUST_MESSAGE_FIELDS = ("type", "body", "blocks", "content_taint", "handling_mode", "objective_id")

# --- Ed25519 (RFC 8032, section 5.1), with Python integers -----------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = (-121665 * pow(121666, P - 2, P)) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _inv(x):
    return pow(x, P - 2, P)


def _recover_x(y, sign):
    if y >= P:
        return None
    xx = (y * y - 1) * _inv(D * y * y + 1) % P
    if xx == 0:
        return None if sign else 0
    x = pow(xx, (P + 3) // 8, P)
    if (x * x - xx) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - xx) % P != 0:
        return None
    if x & 1 != sign:
        x = P - x
    return x


_BY = 4 * _inv(5) % P
_BX = _recover_x(_BY, 0)
BASE = (_BX, _BY, 1, _BX * _BY % P)  # extended coordinates (X, Y, Z, T)
IDENTITY = (0, 1, 1, 0)


def _add(p, q):
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, p):
    q = IDENTITY
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _encode_point(p):
    zi = _inv(p[2])
    x, y = p[0] * zi % P, p[1] * zi % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _decode_point(b):
    if len(b) != 32:
        return None
    y = int.from_bytes(b, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


def _h(*parts):
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def _secret(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(seed):
    a, _ = _secret(seed)
    return _encode_point(_mul(a, BASE))


def sign(seed, msg):
    a, prefix = _secret(seed)
    pub = _encode_point(_mul(a, BASE))
    r = _h(prefix, msg) % L
    rb = _encode_point(_mul(r, BASE))
    k = _h(rb, pub, msg) % L
    s = (r + k * a) % L
    return rb + int.to_bytes(s, 32, "little")


def verify(pub, msg, sig):
    if len(sig) != 64:
        return False
    a = _decode_point(pub)
    r = _decode_point(sig[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(sig[32:], "little")
    if s >= L:
        return False
    k = _h(sig[:32], pub, msg) % L
    return _encode_point(_mul(s, BASE)) == _encode_point(_add(r, _mul(k, a)))


# --- CBOR (RFC 8949): a decoder and a canonical encoder ----------------------


class CBORError(Exception):
    pass


class Decoder:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise CBORError("truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def arg(self, ai):
        if ai < 24:
            return ai
        if ai in (24, 25, 26, 27):
            return int.from_bytes(self.take(1 << (ai - 24)), "big")
        if ai == 31:
            return None  # indefinite length
        raise CBORError("reserved additional information %d" % ai)

    def item(self, depth=0):
        if depth > 64:
            raise CBORError("too deep")
        ib = self.take(1)[0]
        major, ai = ib >> 5, ib & 31
        if major == 7:
            return self.simple(ai)
        n = self.arg(ai)
        if major == 0:
            return n
        if major == 1:
            return -1 - n
        if major in (2, 3):
            if n is None:
                chunks = []
                while self.data[self.pos:self.pos + 1] != b"\xff":
                    c = self.item(depth + 1)
                    if type(c) is not (bytes if major == 2 else str):
                        raise CBORError("bad chunk")
                    chunks.append(c)
                self.take(1)
                return b"".join(chunks) if major == 2 else "".join(chunks)
            raw = self.take(n)
            return raw if major == 2 else raw.decode("utf-8")
        if major == 4:
            out = []
            while n is None and self.data[self.pos:self.pos + 1] != b"\xff" or n is not None and len(out) < n:
                out.append(self.item(depth + 1))
            if n is None:
                self.take(1)
            return out
        if major == 5:
            out, count = {}, 0
            while n is None and self.data[self.pos:self.pos + 1] != b"\xff" or n is not None and count < n:
                k = self.item(depth + 1)
                if not isinstance(k, str):
                    raise CBORError("map key is not text")
                if k in out:
                    raise CBORError("duplicate key")
                out[k] = self.item(depth + 1)
                count += 1
            if n is None:
                self.take(1)
            return out
        if major == 6:
            return self.item(depth + 1)  # tags are not used: the value stands
        raise CBORError("bad major type")

    def simple(self, ai):
        if ai == 20:
            return False
        if ai == 21:
            return True
        if ai == 22:
            return None
        if ai == 25:
            return struct.unpack(">e", self.take(2))[0]
        if ai == 26:
            return struct.unpack(">f", self.take(4))[0]
        if ai == 27:
            return struct.unpack(">d", self.take(8))[0]
        raise CBORError("unsupported simple value %d" % ai)


def decode(data):
    d = Decoder(data)
    v = d.item()
    if d.pos != len(data):
        raise CBORError("trailing bytes")
    return v


def _head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for ai, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | ai]) + n.to_bytes(size, "big")
    raise CBORError("integer too large")


def _float(f):
    for fmt, ai in ((">e", 25), (">f", 26)):
        try:
            b = struct.pack(fmt, f)
        except (OverflowError, struct.error):
            continue
        if struct.unpack(fmt, b)[0] == f:
            return bytes([0xE0 | ai]) + b
    return b"\xfb" + struct.pack(">d", f)


def encode(v):
    """Canonical CBOR: shortest heads, shortest exact floats, map keys
    sorted shorter first, then bytewise."""
    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, int):
        return _head(0, v) if v >= 0 else _head(1, -1 - v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, bytes):
        return _head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode("utf-8")
        return _head(3, len(b)) + b
    if isinstance(v, list):
        return _head(4, len(v)) + b"".join(encode(x) for x in v)
    if isinstance(v, dict):
        items = [(encode(k), encode(x)) for k, x in v.items()]
        items.sort(key=lambda kv: (len(kv[0]), kv[0]))
        return _head(5, len(items)) + b"".join(k + x for k, x in items)
    raise CBORError("cannot encode %r" % type(v))


# --- the peer -----------------------------------------------------------------


def key_text(raw):
    return "ed25519:" + base64.b64encode(raw).decode()


def read_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    path, seed, sender = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]
    if len(seed) != 32 or not sender.startswith("ed25519:"):
        print("bad seed or sender key", file=sys.stderr)
        return 2
    sender_key = base64.b64decode(sender[len("ed25519:"):], validate=True)
    me = public_key(seed)

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(4)
    srv.settimeout(120)
    print("READY " + key_text(me), flush=True)

    conn, _ = srv.accept()
    conn.settimeout(60)
    report = {"verified": False}
    try:
        size = int.from_bytes(read_exact(conn, 4), "big")
        if size > MAX_FRAME:
            raise CBORError("frame too large")
        env = decode(read_exact(conn, size))
        kind = env["kind"]
        report.update(type=kind.get("type"), fields=sorted(kind), body=kind.get("body"),
                      objective_id=kind.get("objective_id"))
        if env["to"] != me or env["from"] != sender_key:
            report["error"] = "not addressed to this peer, or from another sender"
        else:
            rebuilt = {k: kind[k] for k in RUST_MESSAGE_FIELDS if k in kind}
            signed = encode([env["id"], env["from"], env["to"], rebuilt])
            report["verified"] = verify(env["from"], signed, env["sig"])
        if report["verified"]:
            ack_id = bytearray(os.urandom(16))
            ack_id[6] = ack_id[6] & 0x0F | 0x40  # UUID version 4
            ack_id[8] = ack_id[8] & 0x3F | 0x80
            ack_kind = {"type": "ack", "in_reply_to": env["id"]}
            ack_sig = sign(seed, encode([bytes(ack_id), me, env["from"], ack_kind]))
            payload = encode({"id": bytes(ack_id), "from": me, "to": env["from"], "kind": ack_kind, "sig": ack_sig})
            conn.sendall(len(payload).to_bytes(4, "big") + payload)
    except (CBORError, EOFError, KeyError, UnicodeDecodeError, OSError, AttributeError, TypeError) as e:
        report["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
        srv.close()
    print(json.dumps(report), flush=True)
    return 0 if report["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
