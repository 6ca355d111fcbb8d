"""secp256k1 in plain Python: public keys, RFC 6979 signatures with low s, and public-key recovery (SEC 1, 4.1.6).

Hand-rolled so that a signature costs no third-party import: eth_keys brings eth_utils and pydantic, 13 MB held
for the daemon's life after its first signature (README: Dependencies). Checked against eth_keys and eth-account
(tests/test_secp256k1.py). Not constant-time: the key is the agent's own and only its own code runs here.
"""

from __future__ import annotations

import hashlib
import hmac

P = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
G = (0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
     0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8)

_Jacobian = tuple[int, int, int]  # (X, Y, Z) for x = X / Z^2, y = Y / Z^3; Z = 0 is the point at infinity
_INFINITY: _Jacobian = (0, 1, 0)


class SignatureError(ValueError):
    """A signature that names no public key."""


def _double(point: _Jacobian) -> _Jacobian:
    x, y, z = point
    if not y or not z:
        return _INFINITY
    yy = y * y % P
    s = 4 * x * yy % P
    m = 3 * x * x % P  # a = 0
    x3 = (m * m - 2 * s) % P
    return x3, (m * (s - x3) - 8 * yy * yy) % P, 2 * y * z % P


def _add(p: _Jacobian, q: _Jacobian) -> _Jacobian:
    if not p[2]:
        return q
    if not q[2]:
        return p
    z1z1, z2z2 = p[2] * p[2] % P, q[2] * q[2] % P
    u1, u2 = p[0] * z2z2 % P, q[0] * z1z1 % P
    s1, s2 = p[1] * q[2] * z2z2 % P, q[1] * p[2] * z1z1 % P
    if u1 == u2:
        return _double(p) if s1 == s2 else _INFINITY
    h, r = (u2 - u1) % P, (s2 - s1) % P
    hh = h * h % P
    hhh, v = h * hh % P, u1 * hh % P
    x3 = (r * r - hhh - 2 * v) % P
    return x3, (r * (v - x3) - s1 * hhh) % P, h * p[2] * q[2] % P


def _multiply(point: _Jacobian, scalar: int) -> _Jacobian:
    result = _INFINITY
    for bit in bin(scalar % N)[2:]:
        result = _double(result)
        if bit == "1":
            result = _add(result, point)
    return result


def _affine(point: _Jacobian) -> tuple[int, int]:
    if not point[2]:
        raise SignatureError("the point at infinity")
    z_inv = pow(point[2], -1, P)
    z_inv2 = z_inv * z_inv % P
    return point[0] * z_inv2 % P, point[1] * z_inv2 * z_inv % P


def _scalar(key: bytes) -> int:
    d = int.from_bytes(key, "big")
    if len(key) != 32 or not 0 < d < N:
        raise ValueError("a private key is 32 bytes, between 1 and the curve order")
    return d


def public_key(private_key: bytes) -> bytes:
    """The 64-byte uncompressed public key (x || y) of a 32-byte private key."""
    x, y = _affine(_multiply((*G, 1), _scalar(private_key)))
    return x.to_bytes(32, "big") + y.to_bytes(32, "big")


def _nonces(d: int, digest: bytes):
    """RFC 6979 (3.2) with HMAC-SHA256: the candidate nonces for ``d`` over ``digest``, in order."""
    x = d.to_bytes(32, "big")
    h = (int.from_bytes(digest, "big") % N).to_bytes(32, "big")
    k, v = b"\x00" * 32, b"\x01" * 32
    k = hmac.new(k, v + b"\x00" + x + h, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    k = hmac.new(k, v + b"\x01" + x + h, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    while True:
        v = hmac.new(k, v, hashlib.sha256).digest()
        candidate = int.from_bytes(v, "big")
        if 0 < candidate < N:
            yield candidate
        k = hmac.new(k, v + b"\x00", hashlib.sha256).digest()
        v = hmac.new(k, v, hashlib.sha256).digest()


def sign(private_key: bytes, digest: bytes) -> tuple[int, int, int]:
    """(r, s, recovery id 0 or 1) over a 32-byte digest: deterministic, s in the lower half of the order."""
    if len(digest) != 32:
        raise ValueError("a digest is 32 bytes")
    d, z = _scalar(private_key), int.from_bytes(digest, "big")
    for k in _nonces(d, digest):
        x, y = _affine(_multiply((*G, 1), k))
        if x >= N:  # r would need a recovery id of 2 or 3, which Ethereum's v cannot carry
            continue
        r = x
        s = pow(k, -1, N) * (z + r * d) % N
        if not r or not s:
            continue
        parity = y & 1
        if s > N // 2:
            s, parity = N - s, parity ^ 1
        return r, s, parity
    raise AssertionError("unreachable")  # pragma: no cover (the nonce generator never ends)


def recover(digest: bytes, r: int, s: int, recovery_id: int) -> bytes:
    """The 64-byte public key whose signature (r, s, recovery id) is over ``digest``; SignatureError otherwise."""
    if len(digest) != 32:
        raise ValueError("a digest is 32 bytes")
    if recovery_id not in (0, 1):
        raise SignatureError("the recovery id must be 0 or 1")
    if not (0 < r < N and 0 < s < N):
        raise SignatureError("r and s must lie between 1 and the curve order")
    alpha = (pow(r, 3, P) + 7) % P
    beta = pow(alpha, (P + 1) // 4, P)
    if beta * beta % P != alpha:
        raise SignatureError("r is no point's x coordinate")
    y = beta if beta & 1 == recovery_id else P - beta
    r_inv = pow(r, -1, N)
    z = int.from_bytes(digest, "big")
    point = _add(_multiply((r, y, 1), s * r_inv), _multiply((*G, 1), -z * r_inv))
    x, y = _affine(point)
    return x.to_bytes(32, "big") + y.to_bytes(32, "big")
