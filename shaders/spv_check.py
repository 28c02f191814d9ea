"""Structural check of a SPIR-V module before tensord embeds it.

spirv-val 2023.1 (Debian 12) cannot read SPV_KHR_cooperative_matrix, and
NVIDIA's driver crashed the process inside vkCreateComputePipelines on a
malformed module instead of returning an error (shared TENSOR_CORES.md), so
spv_coopmat_khr.py checks what it writes with this: the logical layout
(section order, one definition per id, every id defined before it is used
where SPIR-V requires it), unique types, cooperative-matrix types, loads,
stores and products consistent (one KHR type per Use, MulAdd on MatrixA x
MatrixB + Accumulator of matching sizes, layouts that are constants 0 or 1),
values flowing through loads, stores, phis, selects, copies, conversions
and access chains with the types they are declared with, and for bfloat16
modules the encoding, capabilities, extension and the instructions
SPV_KHR_bfloat16 allows on bfloat16 values.

check(mod, mode, bf16) raises SpvError with the first problem found."""
from spv_module import OP, SpvError, decode_string

NV_OPS = {5358, 5359, 5360, 5361, 5362}
KHR_OPS = {4456, 4457, 4458, 4459, 4460}
CAP_NV, CAP_KHR, CAP_BF16, CAP_BF16_CM = 5357, 6022, 5116, 5118
EXT_NV, EXT_KHR, EXT_BF16 = 'SPV_NV_cooperative_matrix', 'SPV_KHR_cooperative_matrix', 'SPV_KHR_bfloat16'
SCOPE_SUBGROUP = 3
USE_NAMES = ('MatrixA', 'MatrixB', 'Accumulator')

_TYPES = {19, 20, 21, 22, 23, 24, 28, 29, 30, 32, 33, 4456, 5358}
_CONSTS = {41, 42, 43, 44, 46, 48, 49, 50, 51, 52}
_DEBUG = {2, 3, 4, 5, 6, 7, 330}
_ANNOT = {71, 72, 73, 74, 75, 332}
# Section of each module-level opcode, in the order SPIR-V requires.
_SECTION = {17: 0, 10: 1, 11: 2, 14: 3, 15: 4, 16: 5, 331: 5}
_SECTION.update({op: 6 for op in _DEBUG})
_SECTION.update({op: 7 for op in _ANNOT})
_GLOBAL = _TYPES | _CONSTS | {1, 8, 317}
# Where a use may name an id defined later in the function: labels (branch
# and merge targets) and OpPhi's operands.
_BRANCHES = {246, 247, 249, 250, 251}
# What SPV_KHR_bfloat16 allows a bfloat16 scalar, vector or matrix in (no
# arithmetic): memory, constants, composites, conversions, copies, phis,
# and the cooperative-matrix instructions.
_BF16_OK = {1, 41, 42, 43, 44, 46, 50, 51, 55, 59, 61, 62, 65, 66, 77, 78, 79, 80, 81, 82, 83,
            115, 124, 245, 254, 400, 4457, 4458, 4459, 4460}


class _Types:
    """What the check knows about the module's types and constants."""

    def __init__(self, defs):
        self.defs = defs

    def const_value(self, cid, what):
        d = self.defs.get(cid)
        if d is None or d.op != OP.OpConstant or len(d.ops) != 3:
            raise SpvError('%s %%%d is not a 32-bit integer constant' % (what, cid))
        t = self.defs.get(d.ops[0])
        if t is None or t.op != OP.OpTypeInt or t.ops[1] != 32:
            raise SpvError('%s %%%d is not a 32-bit integer constant' % (what, cid))
        return d.ops[2]

    def coopmat(self, tid):
        """(component, scope, rows, cols, use or None) of a matrix type, else None."""
        d = self.defs.get(tid)
        if d is None or d.op not in (4456, 5358):
            return None
        v = [self.const_value(c, 'matrix operand') for c in d.ops[2:]]
        return (d.ops[1], v[0], v[1], v[2], v[3] if d.op == 4456 else None)

    def type_of(self, vid):
        d = self.defs.get(vid)
        return d.type_id if d is not None else None

    def pointee(self, ptr_type):
        d = self.defs.get(ptr_type)
        return (d.ops[1], d.ops[2]) if d is not None and d.op == OP.OpTypePointer else (None, None)

    def element(self, tid, index_id=None, literal=None):
        """The type one index into `tid` reaches."""
        d = self.defs.get(tid)
        if d is None:
            return None
        if d.op in (23, 24, 28, 29):
            return d.ops[1]
        if d.op in (4456, 5358):
            return d.ops[1]
        if d.op == OP.OpTypeStruct:
            k = literal if literal is not None else self.const_value(index_id, 'struct index')
            return d.ops[1 + k] if 0 <= k < len(d.ops) - 1 else None
        return None

    def is_bf16(self, tid):
        """Whether `tid` is bfloat16 or a vector or matrix of it."""
        d = self.defs.get(tid)
        while d is not None and d.op in (23, 4456, 5358):
            d = self.defs.get(d.ops[1])
        return d is not None and d.op == OP.OpTypeFloat and len(d.ops) == 3 and d.ops[2] == 0


def _layout(mod):
    """Section order, function structure, one definition per id, ids
    defined before use. Returns id -> defining instruction."""
    defs, order, section, func = {}, {}, 0, None
    for n, i in enumerate(mod.insts):
        r = i.result
        if r is not None:
            if not 0 < r < mod.bound:
                raise SpvError('%s defines %%%d outside the id bound %d' % (i.name, r, mod.bound))
            if r in defs:
                raise SpvError('%%%d is defined twice' % r)
            defs[r], order[r] = i, n
        if i.op == OP.OpFunction:
            if func is not None:
                raise SpvError('OpFunction %%%d inside a function' % r)
            func, section = n, 9
            continue
        if func is None:
            s = _SECTION.get(i.op, 8 if i.op in _GLOBAL or i.op == OP.OpVariable else None)
            if s is None:
                raise SpvError('%s outside a function' % i.name)
            if s < section:
                raise SpvError('%s is out of the section order SPIR-V requires' % i.name)
            if i.op == OP.OpVariable and i.ops[2] == 7:
                raise SpvError('OpVariable %%%d of storage class Function outside a function' % r)
            section = s
        elif i.op == OP.OpFunctionEnd:
            func = None
        elif i.op == OP.OpVariable and i.ops[2] != 7:
            raise SpvError('OpVariable %%%d in a function is not of storage class Function' % r)
        elif i.op in _TYPES or i.op in _CONSTS or i.op in _SECTION:
            raise SpvError('%s inside a function' % i.name)
    if func is not None:
        raise SpvError('the last function has no OpFunctionEnd')
    if sum(1 for i in mod.insts if i.op == OP.OpMemoryModel) != 1:
        raise SpvError('not exactly one OpMemoryModel')
    for n, i in enumerate(mod.insts):
        _check_uses(i, n, defs, order)
    return defs


def _check_uses(i, n, defs, order):
    """Every id `i` names exists, and is defined before it where SPIR-V
    wants (types, constants and global variables; values in functions)."""
    section = _SECTION.get(i.op)
    for k, w in i.ids():
        if w not in defs:
            raise SpvError('%s uses %%%d, which is never defined' % (i.name, w))
        if section is not None and section >= 4:
            continue                    # entry points, modes, names, decorations
        if i.op == OP.OpPhi or (i.op in _BRANCHES and defs[w].op == OP.OpLabel):
            continue
        if i.op == OP.OpFunctionCall and k == 2:
            continue
        if order[w] >= n:
            desc = '%%%d' % i.result if i.result is not None else 'it'
            raise SpvError('%s %s uses %%%d before its definition (a forward reference)' %
                           (i.name, desc, w))


def _unique_types(mod, ty):
    """No two declarations of one non-aggregate, non-pointer type."""
    seen = {}
    for i in mod.insts:
        if i.op not in _TYPES or i.op in (28, 29, 30, 32):
            continue
        cm = ty.coopmat(i.result)
        key = (i.op,) + (tuple(cm) if cm else tuple(i.ops[1:]))
        if key in seen:
            raise SpvError('types %%%d and %%%d are the same %s (types must be unique)' %
                           (seen[key], i.result, i.name))
        seen[key] = i.result


def _header(mod, mode, bf16):
    caps = {i.ops[0] for i in mod.insts if i.op == OP.OpCapability}
    exts = {decode_string(i.ops) for i in mod.insts if i.op == OP.OpExtension}
    ops = {i.op for i in mod.insts}
    if mode == 'khr':
        if ops & NV_OPS or CAP_NV in caps or EXT_NV in exts:
            raise SpvError('NV cooperative-matrix instructions, capability or extension remain')
        if ops & KHR_OPS and (CAP_KHR not in caps or EXT_KHR not in exts):
            raise SpvError('KHR cooperative matrices without CooperativeMatrixKHR and %s' % EXT_KHR)
        if mod.version < 0x10300:
            raise SpvError('SPIR-V 1.%d: KHR cooperative matrices need 1.3 or later' %
                           ((mod.version >> 8) & 0xff))
    elif ops & KHR_OPS:
        raise SpvError('the input already holds KHR cooperative matrices')
    mm = [i for i in mod.insts if i.op == OP.OpMemoryModel][0]
    if ops & (NV_OPS | KHR_OPS) and mm.ops[1] != 3:
        raise SpvError('cooperative matrices need the Vulkan memory model (OpMemoryModel Logical Vulkan)')
    halves = [i for i in mod.insts if i.op == OP.OpTypeFloat and i.ops[1] == 16]
    encoded = [i for i in mod.insts if i.op == OP.OpTypeFloat and len(i.ops) > 2]
    if bf16:
        if not halves or any(len(i.ops) != 3 or i.ops[2] != 0 for i in halves):
            raise SpvError('a bfloat16 module must declare its 16-bit float with FP encoding BFloat16KHR')
        if CAP_BF16 not in caps or EXT_BF16 not in exts:
            raise SpvError('bfloat16 without capability BFloat16TypeKHR and %s' % EXT_BF16)
    elif encoded:
        raise SpvError('OpTypeFloat %%%d has an FP encoding in a module that is not bfloat16' %
                       encoded[0].result)
    return caps


def _check_khr_types(mod, ty, caps, bf16):
    for i in mod.insts:
        if i.op != 4456:
            continue
        comp, scope, rows, cols, use = ty.coopmat(i.result)
        if ty.defs[comp].op not in (OP.OpTypeInt, OP.OpTypeFloat):
            raise SpvError('matrix type %%%d: component %%%d is not a number type' % (i.result, comp))
        if use not in (0, 1, 2):
            raise SpvError('matrix type %%%d: Use %d is none of MatrixA, MatrixB, Accumulator' %
                           (i.result, use))
        if scope != SCOPE_SUBGROUP:
            raise SpvError('matrix type %%%d: scope %d is not Subgroup' % (i.result, scope))
        if bf16 and ty.is_bf16(comp) and CAP_BF16_CM not in caps:
            raise SpvError('bfloat16 matrices without capability BFloat16CooperativeMatrixKHR')


def _check_muladd(i, ty):
    t = [ty.coopmat(ty.type_of(x)) for x in i.ops[2:5]]
    res = ty.coopmat(i.ops[0])
    if None in t or res is None:
        raise SpvError('OpCooperativeMatrixMulAddKHR %%%d: an operand is not a matrix' % i.ops[1])
    (_, _, m, k, ua), (_, _, k2, n, ub), (cc, _, m2, n2, uc) = t
    if (ua, ub, uc) != (0, 1, 2):
        raise SpvError('OpCooperativeMatrixMulAddKHR %%%d: operands are %s, %s, %s (want MatrixA, '
                       'MatrixB, Accumulator)' % ((i.ops[1],) + tuple(USE_NAMES[u] for u in (ua, ub, uc))))
    if (k, m, n) != (k2, m2, n2):
        raise SpvError('OpCooperativeMatrixMulAddKHR %%%d: sizes %dx%d * %dx%d + %dx%d do not fit' %
                       (i.ops[1], m, k, k2, n, m2, n2))
    if i.ops[0] != ty.type_of(i.ops[4]):
        raise SpvError('OpCooperativeMatrixMulAddKHR %%%d: the result type is not the accumulator\'s'
                       % i.ops[1])


def _check_khr_op(i, ty):
    if i.op == 4459:
        _check_muladd(i, ty)
        return
    if i.op == 4460:
        if ty.coopmat(i.ops[2]) is None:
            raise SpvError('OpCooperativeMatrixLengthKHR %%%d: operand is not a matrix type' % i.ops[1])
        return
    load = i.op == 4457
    mat, ptr, layout = (i.ops[0], i.ops[2], i.ops[3]) if load else (ty.type_of(i.ops[1]), i.ops[0], i.ops[2])
    what = '%s %s' % (i.name, '%%%d' % i.ops[1] if load else '')
    if ty.coopmat(mat) is None:
        raise SpvError('%s: not a matrix' % what)
    sc, pointee = ty.pointee(ty.type_of(ptr))
    if pointee is None:
        raise SpvError('%s: %%%d is not a pointer' % (what, ptr))
    if sc not in (4, 12, 5349):
        raise SpvError('%s: %%%d points to storage class %d, not Workgroup or StorageBuffer' % (what, ptr, sc))
    elem = ty.defs[pointee]
    if elem.op == OP.OpTypeVector:
        elem = ty.defs[elem.ops[1]]
    if elem.op not in (OP.OpTypeInt, OP.OpTypeFloat):
        raise SpvError('%s: %%%d does not point to a number or a vector of them' % (what, ptr))
    if ty.const_value(layout, 'layout') not in (0, 1):
        raise SpvError('%s: layout %%%d is neither RowMajorKHR (0) nor ColumnMajorKHR (1)' % (what, layout))
    if len(i.ops) <= (4 if load else 3):
        raise SpvError('%s: no stride (a row- or column-major layout needs one)' % what)


def _walk(ty, base, idx, literal):
    for x in idx:
        base = ty.element(base, None if literal else x, x if literal else None)
        if base is None:
            return None
    return base


def _check_value_types(i, ty):
    """The type a value is declared with agrees with where it comes from."""
    op, t = i.op, i.type_id
    want = []                       # (operand id, expected type)
    if op == OP.OpLoad:
        want.append((None, ty.pointee(ty.type_of(i.ops[2]))[1]))
    elif op == OP.OpStore:
        want = [(i.ops[1], ty.pointee(ty.type_of(i.ops[0]))[1])]
    elif op == OP.OpPhi:
        want = [(v, t) for v in i.ops[2::2]]
    elif op == OP.OpSelect:
        want = [(i.ops[3], t), (i.ops[4], t)]
    elif op in (OP.OpCopyObject, OP.OpCopyLogical):
        want = [(i.ops[2], t)]
    elif op == OP.OpVariable and len(i.ops) > 3:
        want = [(i.ops[3], ty.pointee(t)[1])]
    elif op in (OP.OpAccessChain, OP.OpInBoundsAccessChain):
        sc, pointee = ty.pointee(ty.type_of(i.ops[2]))
        rsc, rt = ty.pointee(t)
        if pointee is None or rt is None or sc != rsc or _walk(ty, pointee, i.ops[3:], False) != rt:
            raise SpvError('%s %%%d: the result type is not the element its indices reach' % (i.name, i.ops[1]))
    elif op == OP.OpCompositeExtract:
        if _walk(ty, ty.type_of(i.ops[2]), i.ops[3:], True) != t:
            raise SpvError('OpCompositeExtract %%%d: the result type is not the element reached' % i.ops[1])
    if op == OP.OpLoad and want[0][1] != t:
        raise SpvError('OpLoad %%%d: the result type is not the pointer\'s pointee' % i.ops[1])
    for v, w in want[1 if op == OP.OpLoad else 0:]:
        if ty.type_of(v) != w:
            raise SpvError('%s %s: %%%d has type %%%s, not %%%s' % (
                i.name, '%%%d' % i.result if i.result else '', v, ty.type_of(v), w))
    _check_matrix_value(i, ty)


def _check_matrix_value(i, ty):
    """Conversions, splats and arithmetic on matrices keep scope, size and Use."""
    res = ty.coopmat(i.type_id) if i.type_id else None
    if res is None:
        return
    if i.op in (OP.OpFConvert, OP.OpSConvert, OP.OpUConvert, OP.OpConvertFToS, OP.OpConvertFToU,
                OP.OpConvertSToF, OP.OpConvertUToF, OP.OpBitcast):
        src = ty.coopmat(ty.type_of(i.ops[2]))
        if src is None or src[1:] != res[1:]:
            raise SpvError('%s %%%d: converts between matrices of different scope, size or Use' %
                           (i.name, i.ops[1]))
    elif i.op in (OP.OpCompositeConstruct, OP.OpConstantComposite):
        if len(i.ops) != 3 or ty.type_of(i.ops[2]) != res[0]:
            raise SpvError('%s %%%d: a matrix is made from one value of its component type' %
                           (i.name, i.ops[1]))
    elif i.op in (OP.OpFAdd, OP.OpFSub, OP.OpFMul, OP.OpFDiv, OP.OpFNegate, OP.OpMatrixTimesScalar):
        mats = i.ops[2:3] if i.op == OP.OpMatrixTimesScalar else i.ops[2:]
        if any(ty.type_of(x) != i.type_id for x in mats):
            raise SpvError('%s %%%d: matrix operands differ from the result type' % (i.name, i.ops[1]))


def _check_bf16_use(i, ty):
    """bfloat16 values only where SPV_KHR_bfloat16 allows them."""
    if i.op in _BF16_OK or i.op in _TYPES or i.op in _SECTION or i.op in _DEBUG:
        return
    touched = [i.type_id] if i.type_id else []
    touched += [ty.type_of(w) for k, w in i.ids() if i.kinds[k] == 'i']
    if any(t is not None and ty.is_bf16(t) for t in touched):
        raise SpvError('%s %s computes on bfloat16, which SPV_KHR_bfloat16 allows only in memory, '
                       'constants, composites, conversions and cooperative matrices (no arithmetic)'
                       % (i.name, '%%%d' % i.result if i.result else ''))


def check(mod, mode='khr', bf16=False):
    """Check `mod` (spv_module.Module). mode 'nv': the pass's input (NV
    cooperative matrices allowed, KHR ones not); 'khr': its output (no NV
    left, KHR consistent). bf16: the module is the bfloat16 variant. Raises
    SpvError with the first problem; returns None."""
    defs = _layout(mod)
    ty = _Types(defs)
    caps = _header(mod, mode, bf16)
    _unique_types(mod, ty)
    if mode == 'khr':
        _check_khr_types(mod, ty, caps, bf16)
    in_function = False
    for i in mod.insts:
        if i.op == OP.OpFunction:
            in_function = True
        if mode == 'khr' and i.op in KHR_OPS and i.op != 4456:
            _check_khr_op(i, ty)
        if in_function or i.op in _CONSTS or i.op == OP.OpVariable:
            _check_value_types(i, ty)
        if bf16:
            _check_bf16_use(i, ty)
