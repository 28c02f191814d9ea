"""SPIR-V modules as lists of instructions, for the cooperative-matrix pass
(spv_coopmat_khr.py) and its structural check (spv_check.py).

Only the opcodes glslang 12 writes for tensord's compute shaders are known
(OPS); a module holding any other is refused rather than guessed at, since a
word taken for a literal that is an id (or the reverse) would let a
rewritten module through unchecked. Opcode numbers and operand layouts are
those of the SPIR-V grammar (spirv.core.grammar.json)."""
import struct

MAGIC = 0x07230203


class SpvError(Exception):
    """A module the pass refuses: the message says where and why."""


# Operand patterns, after the result type (t) and result id (r) where the
# opcode has them: i an id, l a literal word, s a literal string, m optional
# memory operands (mask, then a literal for Aligned and an id for each of
# MakePointerAvailable/Visible), ?i an optional id, ?s an optional string,
# *i / *l the rest of the words, w OpSwitch's (literal, label) pairs, q
# OpSpecConstantOp's opcode and operands.
_TABLE = """
1 OpUndef tr
3 OpSource - l l ?i ?s
4 OpSourceExtension - s
5 OpName - i s
6 OpMemberName - i l s
7 OpString r s
8 OpLine - i l l
10 OpExtension - s
11 OpExtInstImport r s
12 OpExtInst tr i l *i
14 OpMemoryModel - l l
15 OpEntryPoint - l i s *i
16 OpExecutionMode - i l *l
17 OpCapability - l
19 OpTypeVoid r
20 OpTypeBool r
21 OpTypeInt r l l
22 OpTypeFloat r l *l
23 OpTypeVector r i l
24 OpTypeMatrix r i l
28 OpTypeArray r i i
29 OpTypeRuntimeArray r i
30 OpTypeStruct r *i
32 OpTypePointer r l i
33 OpTypeFunction r *i
41 OpConstantTrue tr
42 OpConstantFalse tr
43 OpConstant tr *l
44 OpConstantComposite tr *i
46 OpConstantNull tr
48 OpSpecConstantTrue tr
49 OpSpecConstantFalse tr
50 OpSpecConstant tr *l
51 OpSpecConstantComposite tr *i
52 OpSpecConstantOp tr q
54 OpFunction tr l i
55 OpFunctionParameter tr
56 OpFunctionEnd -
57 OpFunctionCall tr i *i
59 OpVariable tr l ?i
61 OpLoad tr i m
62 OpStore - i i m
63 OpCopyMemory - i i m m
65 OpAccessChain tr i *i
66 OpInBoundsAccessChain tr i *i
67 OpPtrAccessChain tr i i *i
68 OpArrayLength tr i l
71 OpDecorate - i l *l
72 OpMemberDecorate - i l l *l
77 OpVectorExtractDynamic tr i i
78 OpVectorInsertDynamic tr i i i
79 OpVectorShuffle tr i i *l
80 OpCompositeConstruct tr *i
81 OpCompositeExtract tr i *l
82 OpCompositeInsert tr i i *l
83 OpCopyObject tr i
84 OpTranspose tr i
224 OpControlBarrier - i i i
225 OpMemoryBarrier - i i
227 OpAtomicLoad tr i i i
228 OpAtomicStore - i i i i
245 OpPhi tr *i
246 OpLoopMerge - i i *l
247 OpSelectionMerge - i l
248 OpLabel r
249 OpBranch - i
250 OpBranchConditional - i i i *l
251 OpSwitch - i i w
252 OpKill -
253 OpReturn -
254 OpReturnValue - i
255 OpUnreachable -
317 OpNoLine -
330 OpModuleProcessed - s
331 OpExecutionModeId - i l *i
332 OpDecorateId - i l *i
333 OpGroupNonUniformElect tr i
342 OpGroupNonUniformBallotBitCount tr i l i
400 OpCopyLogical tr i
4456 OpTypeCooperativeMatrixKHR r i i i i i
4457 OpCooperativeMatrixLoadKHR tr i i ?i m
4458 OpCooperativeMatrixStoreKHR - i i i ?i m
4459 OpCooperativeMatrixMulAddKHR tr i i i *l
4460 OpCooperativeMatrixLengthKHR tr i
5358 OpTypeCooperativeMatrixNV r i i i i
5359 OpCooperativeMatrixLoadNV tr i i i m
5360 OpCooperativeMatrixStoreNV - i i i i m
5361 OpCooperativeMatrixMulAddNV tr i i i
5362 OpCooperativeMatrixLengthNV tr i
"""

# Families of opcodes whose operands are all ids (result type and id first):
# conversions, arithmetic, relational and logical, bit operations, atomics
# with a result, subgroup operations without a GroupOperation.
_ALL_IDS = (list(range(109, 123)) + [124] + list(range(126, 153)) + list(range(154, 192)) +
            list(range(194, 206)) + list(range(229, 243)) + list(range(334, 342)) +
            list(range(343, 349)) + [365, 366])
# Subgroup reductions: scope, GroupOperation (a literal), value [, cluster size].
_GROUP_OPS = list(range(349, 365))

OPS = {}      # opcode -> (name, has result type, has result id, pattern list)
NAMES = {}    # name -> opcode


def _build_table():
    for line in _TABLE.strip().splitlines():
        f = line.split()
        op, name, res = int(f[0]), f[1], f[2]
        OPS[op] = (name, 't' in res, 'r' in res, f[3:])
    for op in _ALL_IDS:
        OPS.setdefault(op, ('Op%d' % op, True, True, ['*i']))
    for op in _GROUP_OPS:
        OPS.setdefault(op, ('OpGroupNonUniform%d' % op, True, True, ['i', 'l', '*i']))
    for op, (name, _, _, _) in OPS.items():
        NAMES[name] = op


_build_table()
# A few arithmetic names the pass and its check use by name.
for _op, _name in ((109, 'OpConvertFToU'), (110, 'OpConvertFToS'), (111, 'OpConvertSToF'),
                   (112, 'OpConvertUToF'), (113, 'OpUConvert'), (114, 'OpSConvert'),
                   (115, 'OpFConvert'), (124, 'OpBitcast'), (127, 'OpFNegate'), (129, 'OpFAdd'),
                   (131, 'OpFSub'), (133, 'OpFMul'), (136, 'OpFDiv'), (143, 'OpMatrixTimesScalar'),
                   (169, 'OpSelect')):
    OPS[_op] = (_name,) + OPS[_op][1:]
    NAMES[_name] = _op
OP = type('OP', (), dict(NAMES))   # OP.OpLoad == 61


class Inst:
    """One instruction: its opcode and its operand words (the opcode word
    excluded). `kinds` is one letter per operand word: t result type, r result
    id, i id, l literal, s a word of a string."""
    __slots__ = ('op', 'ops', 'kinds')

    def __init__(self, op, ops):
        self.op = op
        self.ops = list(ops)
        self.kinds = operand_kinds(op, self.ops)

    @property
    def name(self):
        return OPS[self.op][0]

    @property
    def type_id(self):
        return self.ops[0] if OPS[self.op][1] else None

    @property
    def result(self):
        info = OPS[self.op]
        return self.ops[1 if info[1] else 0] if info[2] else None

    def ids(self):
        """(operand index, id) of every id operand, result type included,
        result id excluded."""
        return [(k, w) for k, (w, c) in enumerate(zip(self.ops, self.kinds)) if c in 'ti']


def _string_words(ops, k):
    """Words of the NUL-terminated string starting at ops[k]."""
    n = 0
    while k + n < len(ops):
        n += 1
        if (ops[k + n - 1] >> 24) == 0:
            return n
    raise SpvError('unterminated literal string')


def _memory_operands(ops, k):
    """Kinds of the memory operands starting at ops[k] (none when absent)."""
    if k >= len(ops):
        return []
    mask, out = ops[k], ['l']
    if mask & ~0x3f:
        raise SpvError('unknown memory operand bits 0x%x' % mask)
    if mask & 0x2:
        out.append('l')    # Aligned
    if mask & 0x8:
        out.append('i')    # MakePointerAvailable's scope
    if mask & 0x10:
        out.append('i')    # MakePointerVisible's scope
    return out


def operand_kinds(op, ops):
    """One kind letter per operand word of opcode `op` (see Inst); raises
    SpvError for an unknown opcode or words that do not fit its layout."""
    if op not in OPS:
        raise SpvError('opcode %d is not one the pass knows' % op)
    name, has_t, has_r, pattern = OPS[op]
    kinds = (['t'] if has_t else []) + (['r'] if has_r else [])
    if len(ops) < len(kinds):
        raise SpvError('%s: too few operands' % name)
    for p in pattern:
        k = len(kinds)
        if p in ('i', 'l'):
            if k >= len(ops):
                raise SpvError('%s: too few operands' % name)
            kinds.append(p)
        elif p in ('s', '?s'):
            if k < len(ops):
                kinds += ['s'] * _string_words(ops, k)
            elif p == 's':
                raise SpvError('%s: missing string' % name)
        elif p == '?i':
            if k < len(ops):
                kinds.append('i')
        elif p == 'm':
            kinds += _memory_operands(ops, k)
        elif p in ('*i', '*l'):
            kinds += [p[1]] * (len(ops) - k)
        elif p == 'w':
            if (len(ops) - k) % 2:
                raise SpvError('%s: odd (literal, label) pairs' % name)
            kinds += ['l', 'i'] * ((len(ops) - k) // 2)
        elif p == 'q':
            if k >= len(ops) or ops[k] not in OPS or not OPS[ops[k]][1]:
                raise SpvError('%s: unknown operation' % name)
            inner = operand_kinds(ops[k], [0, 0] + ops[k + 1:])[2:]
            kinds += ['l'] + inner
    if len(kinds) != len(ops):
        raise SpvError('%s: %d operand words where %d fit' % (name, len(ops), len(kinds)))
    return kinds


class Module:
    """A parsed module: header fields and instructions in order."""

    def __init__(self, version, generator, bound, insts):
        self.version, self.generator, self.bound = version, generator, bound
        self.insts = insts

    def defs(self):
        """id -> defining instruction."""
        return {i.result: i for i in self.insts if i.result is not None}

    def names(self):
        """id -> OpName's string (for messages)."""
        return {i.ops[0]: decode_string(i.ops[1:]) for i in self.insts if i.op == OP.OpName}


def parse(data):
    """Parse SPIR-V bytes (little-endian) into a Module; SpvError when it is
    not one: bad magic or header, a word count of 0 or past the end, an
    opcode or operand layout the pass does not know."""
    if len(data) % 4 or len(data) < 20:
        raise SpvError('%d bytes: not a whole SPIR-V module' % len(data))
    words = struct.unpack('<%dI' % (len(data) // 4), data)
    if words[0] != MAGIC:
        raise SpvError('bad magic 0x%08x (not SPIR-V, or big-endian)' % words[0])
    if words[4] != 0:
        raise SpvError('schema %d is not 0' % words[4])
    insts, k = [], 5
    while k < len(words):
        n, op = words[k] >> 16, words[k] & 0xffff
        if n == 0 or k + n > len(words):
            raise SpvError('instruction at word %d: word count %d runs past the end' % (k, n))
        try:
            insts.append(Inst(op, words[k + 1:k + n]))
        except SpvError as e:
            raise SpvError('instruction at word %d: %s' % (k, e)) from None
        k += n
    return Module(words[1], words[2], words[3], insts)


def write(mod):
    """The module's bytes."""
    out = [MAGIC, mod.version, mod.generator, mod.bound, 0]
    for i in mod.insts:
        out.append(((len(i.ops) + 1) << 16) | i.op)
        out += i.ops
    return struct.pack('<%dI' % len(out), *out)


def decode_string(ops):
    """The literal string at the start of `ops`."""
    raw = b''.join(struct.pack('<I', w) for w in ops)
    return raw.split(b'\0', 1)[0].decode('utf-8', 'replace')


def encode_string(s):
    """Words of literal string `s`, NUL-terminated and padded."""
    raw = s.encode() + b'\0'
    raw += b'\0' * (-len(raw) % 4)
    return list(struct.unpack('<%dI' % (len(raw) // 4), raw))
