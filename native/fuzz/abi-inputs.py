#!/usr/bin/env python3
"""Writes native/fuzz/corpus/abi-*: one kernel message each with one attribute of a length
libnftnl 1.2.4 exits() on (its type checks, native/attr.cc CheckRule and the rest), at each kind
of place the addon's checks look: a message's own attribute, a nest of it, an expression, a data
register's verdict, a dynset's statement, a set's expressions and concatenation, an element's
expressions. The replay (scripts/fuzz.sh replay) aborts if the addon's checks let one through.
    python3 native/fuzz/abi-inputs.py
"""
import os
import struct

NESTED = 0x8000
NEWCHAIN, NEWRULE, NEWSET, NEWSETELEM, NEWOBJ = 3, 6, 9, 12, 18


def attr(t, payload=b"", nested=False):
    n = 4 + len(payload)
    return struct.pack("=HH", n, t | (NESTED if nested else 0)) + payload + b"\0" * (-n % 4)


def nest(t, *attrs):
    return attr(t, b"".join(attrs), nested=True)


def s(t, text):
    return attr(t, text.encode() + b"\0")


def u32(t, v):
    return attr(t, struct.pack(">I", v))


def u64(t, v):
    return attr(t, struct.pack(">Q", v))


def short(t):  # two bytes where libnftnl checks for a u32 or u64
    return attr(t, b"\0\1")


def message(kind, *attrs):
    body = struct.pack("=BBH", 2, 0, 0) + b"".join(attrs)  # nfgenmsg: ip, version 0
    return struct.pack("=IHHII", 16 + len(body), (10 << 8) | kind, 0x2, 1, 0) + body


def expr(name, *data):
    return nest(1, s(1, name), nest(2, *data))  # NFTA_LIST_ELEM: NFTA_EXPR_NAME, NFTA_EXPR_DATA


def obj(kind, *data):
    return message(NEWOBJ, s(1, "nfkeeper"), s(2, "o"), u32(3, kind), nest(4, *data))


def rule(*exprs, extra=()):
    return message(NEWRULE, s(1, "nfkeeper"), s(2, "input"), u64(3, 7), *extra, nest(4, *exprs))


inputs = {
    # the rule's own attribute (NFTA_RULE_HANDLE) and a nest of it (NFTA_RULE_COMPAT > PROTO)
    "rule-handle": rule(expr("counter", u64(1, 0), u64(2, 0)), extra=(short(3),)),
    "rule-compat": rule(extra=(nest(5, short(1)),)),
    # an expression's attribute: cmp's NFTA_CMP_SREG; log's NFTA_LOG_GROUP (a u16)
    "expr-cmp": rule(expr("cmp", short(1), u32(2, 0), nest(3, attr(1, b"\x06")))),
    "expr-log": rule(expr("log", attr(1, b"\0\0\0\1"))),
    # a verdict in a data register: immediate's NFTA_IMMEDIATE_DATA > NFTA_DATA_VERDICT > CHAIN_ID
    # (an accept; a short code the older checks refuse already)
    "expr-verdict": rule(expr("immediate", u32(1, 0), nest(2, nest(2, u32(1, 1), short(3))))),
    # a dynset's statement: NFTA_DYNSET_EXPR (counter) > NFTA_COUNTER_PACKETS
    "expr-dynset": rule(expr("dynset", s(1, "s"), u32(3, 0), u32(4, 1),
                             nest(7, s(1, "counter"), nest(2, u64(1, 0), short(2))))),
    # a chain's attribute (NFTA_CHAIN_USE) and its hook's (NFTA_HOOK_PRIORITY)
    "chain-use": message(NEWCHAIN, s(1, "nfkeeper"), s(3, "input"), u64(2, 1), short(6)),
    "chain-hook": message(NEWCHAIN, s(1, "nfkeeper"), s(3, "input"), u64(2, 1), nest(4, u32(1, 1), short(2))),
    # a set's attribute (NFTA_SET_KEY_LEN), its concatenation's field length, its expressions
    "set-keylen": message(NEWSET, s(1, "nfkeeper"), s(2, "s"), u32(4, 7), short(5)),
    "set-concat": message(NEWSET, s(1, "nfkeeper"), s(2, "s"), u32(4, 7), u32(5, 8),
                          nest(9, nest(2, nest(1, u32(1, 4)), nest(1, short(1))))),
    "set-exprs": message(NEWSET, s(1, "nfkeeper"), s(2, "s"), u32(4, 7), u32(5, 4),
                         nest(18, expr("counter", short(1), u64(2, 0)))),
    # an element's expressions: NFTA_SET_ELEM_EXPRESSIONS > counter > NFTA_COUNTER_PACKETS
    "setelem-exprs": message(NEWSETELEM, s(1, "nfkeeper"), s(2, "s"),
                             nest(3, nest(1, nest(1, attr(1, b"\1\2\3\4")),
                                          nest(11, expr("counter", u64(1, 0), short(2)))))),
    # stateful objects: a counter's NFTA_COUNTER_BYTES; a ct timeout's TCP policy (a timeout of
    # 2 bytes); a tunnel's NFTA_TUNNEL_KEY_IP > SRC; a ct helper's name of 16 bytes or more; a
    # secmark context of 256 bytes or more (libnftnl 1.2.4's limit; kernels allow 4096)
    "obj-counter": obj(1, short(1), u64(2, 0)),
    "obj-cttimeout": obj(7, attr(1, b"\0\2"), attr(2, b"\6"), nest(3, u32(1, 60), short(3))),
    "obj-tunnel": obj(6, u32(1, 1), nest(2, short(1))),
    "obj-cthelper": obj(3, s(1, "h" * 20), attr(2, b"\0\2"), attr(3, b"\6")),
    "obj-secmark": obj(8, s(1, "system_u:object_r:" + "x" * 300)),
}

corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
for name, data in inputs.items():
    with open(os.path.join(corpus, "abi-" + name), "wb") as f:
        f.write(data)
print(f"{len(inputs)} inputs written to {corpus}/abi-*")
