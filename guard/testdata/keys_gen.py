#!/usr/bin/env python3
"""Generates keys.json: key vectors checked by TestKeyVectors.

Independent of the Go code: the canonical text comes from jcs_ref.py (a
separate RFC 8785 implementation), and each entry's key-path selection is
written out by hand below rather than evaluated by a JMESPath engine.
Run from this folder: python3 keys_gen.py > keys.json
"""
import base64, gzip, hashlib, json
from jcs_ref import canon, loads

def b64(b): return base64.b64encode(b).decode()
def b64gz(b): return base64.b64encode(gzip.compress(b, mtime=0)).decode()

ORDER = '{"order": {"id": "o-1", "lines": [{"sku": "x", "qty": 2}]}, "customer": {"id": "c-1"}, "meta": {"ts": 1700000000}}'

# (scope, input JSON text, keyPath or None, selection JSON text or None for "the whole input")
V = [
    ("orders", '{"b":2,"a":1}', None, None),
    ("orders", '{ "a" : 1 , "b" : 2 }', None, None),
    ("payments", '{"a":1,"b":2}', None, None),
    ("orders", '{"n":1.0}', None, None),
    ("orders", '{"n":1e2}', None, None),
    ("orders", '{"big":9007199254740993,"small":1e-7,"neg":-0,"e":1E21}', None, None),
    ("orders", '"plain string"', None, None),
    ("orders", '42', None, None),
    ("orders", '0', None, None),
    ("orders", 'false', None, None),
    ("activity:ChargeCard", '[1,2,3]', None, None),
    ("orders", '{"\\u20ac":"x","\\r":"y","\\ud83d\\ude00":"z","\\ufb33":"w"}', None, None),
    ("orders", '{"s":"<tag> & \\"q\\" \\/ \\u0007"}', None, None),
    ("orders", '{"a":{"b":null},"c":[null]}', None, None),
    ("orders", ORDER, "order.id", '"o-1"'),
    ("orders", ORDER, "order", '{"id": "o-1", "lines": [{"sku": "x", "qty": 2}]}'),
    ("orders", ORDER, "[order.id, customer.id]", '["o-1", "c-1"]'),
    ("orders", ORDER, "{o: order.id, c: customer.id}", '{"o": "o-1", "c": "c-1"}'),
    ("orders", ORDER, "order.lines[0].qty", '2'),
    ("orders", ORDER, "@", ORDER),
    ("orders", '{"headers":{"Idempotency-Key":"abc-123"}}', 'headers."Idempotency-Key"', '"abc-123"'),
    ("orders", '{"Records":[{"messageId":"m-1","body":"x"}]}', "Records[0].messageId", '"m-1"'),
    ("orders", json.dumps({"body": '{"order_id": 42, "note": "x"}'}), "powertools_json(body).order_id", '42'),
    ("orders", json.dumps({"body": '{"b": [1.0, 2], "a": "\\u00e9"}'}), "powertools_json(body)", '{"a": "\\u00e9", "b": [1, 2]}'),
    ("orders", json.dumps({"data": b64(b"order-77")}), "powertools_base64(data)", '"order-77"'),
    ("orders", json.dumps({"data": b64(b'{"id": "abc", "x": 1}')}), "powertools_json(powertools_base64(data)).id", '"abc"'),
    ("orders", json.dumps({"data": b64gz(b"hello gzip")}), "powertools_base64_gzip(data)", '"hello gzip"'),
    ("orders", json.dumps({"data": b64gz(b'{"order": {"id": 7, "tags": ["b", "a"]}}')}), "powertools_json(powertools_base64_gzip(data)).order", '{"id": 7, "tags": ["b", "a"]}'),
    ("orders", '{"id":0}', "id", '0'),
    ("orders", '{"id":false}', "id", 'false'),
    # Missing selections: expectedKey "" means the call runs unguarded.
    ("orders", 'null', None, 'null'),
    ("orders", '{}', None, '{}'),
    ("orders", '{"a":null,"b":null}', None, '{"a":null,"b":null}'),
    ("orders", '[null]', None, '[null]'),
    ("orders", '""', None, '""'),
    ("orders", '{"id":""}', "id", '""'),
    ("orders", '{"id":null}', "id", 'null'),
    ("orders", '{"other":1}', "id", 'null'),
    ("orders", '{"id":{}}', "id", '{}'),
    ("orders", '{"id":[]}', "id", '[]'),
]

def missing(v):
    if v is None: return True
    if isinstance(v, str): return v == ""
    if isinstance(v, list): return all(e is None for e in v)
    if isinstance(v, dict): return all(e is None for e in v.values())
    return False

out = []
for scope, inp, path, sel in V:
    loads(inp)  # must be valid
    value = loads(sel if sel is not None else inp)
    e = {"scope": scope, "input": json.loads(inp)}
    if path is not None:
        e["keyPath"] = path
    if missing(value):
        e["canonical"], e["expectedKey"] = None, ""
    else:
        c = canon(value)
        e["canonical"] = c
        e["expectedKey"] = scope + "#" + hashlib.sha256(c.encode()).hexdigest()
    # Keep the input's exact spelling (1.0, 1e2, escapes): it is what is tested.
    e["input"] = "@@INPUT@@"
    line = json.dumps(e, ensure_ascii=False).replace('"@@INPUT@@"', inp)
    out.append(line)
print("[\n  " + ",\n  ".join(out) + "\n]")
