"""Independent RFC 8785 canonicaliser (for generating and checking test vectors)."""
import json, math, struct
from decimal import Decimal

def es6_number(x):
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise ValueError("not a JSON number")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    x = abs(x)
    t = Decimal(repr(x)).as_tuple()
    digits = list(t.digits)
    exp = t.exponent
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop(); exp += 1
    while len(digits) > 1 and digits[0] == 0:
        digits.pop(0)
    s = "".join(map(str, digits)); k = len(s); n = exp + k
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + s
    else:
        e = n - 1
        es = ("+" if e >= 0 else "-") + str(abs(e))
        out = (s if k == 1 else s[0] + "." + s[1:]) + "e" + es
    return sign + out

ESC = {'"': '\\"', '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t'}

def string(s):
    out = ['"']
    for ch in s:
        if ch in ESC:
            out.append(ESC[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)

def canon(v):
    if v is None: return "null"
    if v is True: return "true"
    if v is False: return "false"
    if isinstance(v, (int, float)): return es6_number(v)
    if isinstance(v, str): return string(v)
    if isinstance(v, list): return "[" + ",".join(canon(e) for e in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(string(k) + ":" + canon(v[k]) for k in keys) + "}"
    raise TypeError(type(v))

def _dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d: raise ValueError("duplicate key " + k)
        d[k] = v
    return d

def loads(text):
    def bad(c): raise ValueError(c)
    return json.loads(text, parse_int=float, parse_constant=bad, object_pairs_hook=_dups)

def canonical_text(text):
    return canon(loads(text))
