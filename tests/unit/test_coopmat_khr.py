#!/usr/bin/python3
"""Unit tests of shaders/spv_coopmat_khr.py, the build's rewrite of glslang
12's NV cooperative-matrix SPIR-V into SPV_KHR_cooperative_matrix (and
bfloat16). Lavapipe has no cooperative matrices, so these test the pass
itself: tiny GLSL shaders compiled here with glslang (buffer loads, shared
uvec4 arrays, MulAdd in a loop, stores, arithmetic and a conversion of the
accumulator to 16 bits), a module assembled with spirv-as where GLSL cannot
reach (glslang keeps matrices in variables even with -Os, so phis of
matrices and constants shared by two Uses come from assembly), the modules
the build embeds, and malformed inputs, which must be refused with a clear
error and no output. The results are read with the small SPIR-V reader below,
independent of the pass's own.

  test_coopmat_khr.py PASS.py GLSLANG SPIRV_AS [BUILT.spv ...]

A built module not named on the command line is looked for beside those
that are (the layouts' modules, matmul_cm_khr_nt.f16.spv and the like, sit
in the same build directory)."""
import os
import struct
import subprocess
import sys
import tempfile
import unittest

PASS = GLSLANG = SPIRV_AS = None
BUILT = []

# ---- a small SPIR-V reader ---------------------------------------------------

NV_OPS = range(5358, 5363)
KHR_TYPE, KHR_LOAD, KHR_STORE, KHR_MULADD, KHR_LENGTH = 4456, 4457, 4458, 4459, 4460
# Opcodes with a result type and id (the rest of those these modules hold
# have a result id only, or none).
TYPED = ({1, 12, 54, 55, 57, 59, 61, 65, 66, 67, 68, 245, 400} | set(range(41, 53)) |
         set(range(77, 85)) | set(range(109, 206)) | {4457, 4459, 4460, 5359, 5361, 5362})
RESULT_ONLY = {7, 11, 19, 20, 21, 22, 23, 24, 28, 29, 30, 32, 33, 248, 4456, 5358}
TYPES = {19, 20, 21, 22, 23, 24, 28, 29, 30, 32, 33, 4456, 5358}
# The id operands of types.
TYPE_IDS = {23: lambda a: a[1:2], 24: lambda a: a[1:2], 28: lambda a: a[1:3], 29: lambda a: a[1:2],
            30: lambda a: a[1:], 32: lambda a: a[2:3], 33: lambda a: a[1:], 4456: lambda a: a[1:]}


class Mod:
    def __init__(self, data):
        w = struct.unpack('<%dI' % (len(data) // 4), data)
        assert w[0] == 0x07230203, 'magic'
        self.version, self.bound, self.insts, k = w[1], w[3], [], 5
        while k < len(w):
            n = w[k] >> 16
            assert n and k + n <= len(w), 'word count at %d' % k
            self.insts.append((w[k] & 0xffff, list(w[k + 1:k + n])))
            k += n
        self.defs = {}
        for op, a in self.insts:
            r = a[1] if op in TYPED else a[0] if op in RESULT_ONLY else None
            if r is not None:
                assert r not in self.defs, '%%%d defined twice' % r
                assert r < self.bound, '%%%d past the bound' % r
                self.defs[r] = (op, a)

    def ops(self, op):
        return [a for o, a in self.insts if o == op]

    def type_of(self, x):
        op, a = self.defs[x]
        return a[0] if op in TYPED else None

    def const(self, x):
        op, a = self.defs[x]
        assert op == 43, '%%%d is not an OpConstant' % x
        return a[2]

    def use(self, t):
        """Use of KHR matrix type t, or of the matrices a pointer or array reaches."""
        op, a = self.defs[t]
        while op in (28, 29, 32):
            t = a[2] if op == 32 else a[1]
            op, a = self.defs[t]
        assert op == KHR_TYPE, '%%%d is not a KHR matrix type' % t
        return self.const(a[5])

    def matrix(self, t):
        op, a = self.defs[t]
        assert op == KHR_TYPE
        return (a[1],) + tuple(self.const(x) for x in a[2:6])

    def position(self, x):
        return next(n for n, (op, a) in enumerate(self.insts) if self.defs.get(x) == (op, a))


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def caps(m):
    return {a[0] for a in m.ops(17)}


def exts(m):
    return {struct.pack('<%dI' % len(a), *a).split(b'\0')[0].decode() for a in m.ops(10)}


def check_khr(t, m):
    """What every rewritten module must be."""
    t.assertFalse([o for o, _ in m.insts if o in NV_OPS], 'NV instructions left')
    t.assertNotIn(5357, caps(m))
    t.assertIn(6022, caps(m))
    t.assertIn('SPV_KHR_cooperative_matrix', exts(m))
    t.assertNotIn('SPV_NV_cooperative_matrix', exts(m))
    seen = set()
    for a in m.ops(KHR_TYPE):
        key = m.matrix(a[0])
        t.assertNotIn(key, seen, 'KHR matrix types not unique')
        seen.add(key)
        t.assertIn(key[4], (0, 1, 2))
        for x in a[1:]:     # component, scope, rows, cols, Use: defined before the type
            t.assertLess(m.position(x), m.position(a[0]), 'forward reference in %%%d' % a[0])
    first_fn = next(n for n, (op, _) in enumerate(m.insts) if op == 54)
    for n, (op, a) in enumerate(m.insts):
        if op in TYPED and op != 245:   # result types, and types' operands, come first
            t.assertLess(m.position(a[0]), n)
        if op in TYPE_IDS and n < first_fn:
            for x in TYPE_IDS[op](a):
                t.assertLess(m.position(x), n, 'forward reference in a type')
        if op in (KHR_LOAD, KHR_MULADD):
            for x in a[2:5 if op == KHR_MULADD else 5]:
                t.assertLess(m.position(x), n)
    for a in m.ops(KHR_MULADD):
        t.assertEqual([m.use(m.type_of(x)) for x in a[2:5]], [0, 1, 2])
        t.assertEqual(m.use(a[0]), 2)
    for layout in [a[3] for a in m.ops(KHR_LOAD)] + [a[2] for a in m.ops(KHR_STORE)]:
        t.assertIn(m.const(layout), (0, 1))


# ---- running glslang, spirv-as and the pass ----------------------------------

HEAD = """#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
layout(local_size_x = 32) in;
"""

# Buffer loads (row- and column-major), MulAdd in a loop, an f32 store.
LOOP = HEAD + """
layout(std430, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, binding = 1) readonly buffer B { float16_t b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint k; } pc;
void main()
{
	ACC acc = ACC(0.0);
	for (uint k0 = 0u; k0 < pc.k; k0 += 16u) {
		HALF fa, fb;
		coopMatLoadNV(fa, a, k0, pc.k, false);
		coopMatLoadNV(fb, b, k0 * 16u, 16u, true);
		acc = coopMatMulAddNV(fa, fb, acc);
	}
	coopMatStoreNV(acc, o, 0u, 16u, false);
}
"""

# Shared uvec4 arrays, arrays of fragments, arithmetic on accumulators, the
# accumulator converted to f16 and stored, two f16 constants stored.
SHARED = HEAD + """
#extension GL_EXT_control_flow_attributes : require
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) buffer O { float16_t o[]; };
shared uvec4 As[48];
shared uvec4 Bs[48];
void main()
{
	uint t = gl_LocalInvocationID.x;
	As[t] = a[t];
	Bs[t] = a[t + 48u];
	if (t < 16u) {
		As[t + 32u] = a[t + 32u];
		Bs[t + 32u] = a[t + 80u];
	}
	barrier();
	HALF fa[2], fb[2];
	ACC acc[2];
	[[unroll]] for (int i = 0; i < 2; i++) {
		coopMatLoadNV(fa[i], As, uint(i), 3u, false);
		coopMatLoadNV(fb[i], Bs, uint(i), 3u, false);
		acc[i] = ACC(0.0);
	}
	for (int i = 0; i < 2; i++)
		acc[i] = coopMatMulAddNV(fa[i], fb[1 - i], acc[i]);
	HALF h = HALF(acc[0] + acc[1]);
	coopMatStoreNV(h, o, 0u, 16u, false);
	if (t == 0u) {
		o[300] = float16_t(1.01171875);
		o[301] = float16_t(-2.5);
	}
}
"""

# Arithmetic on a 16-bit scalar: fine as f16, refused as bfloat16.
F16_MATH = HEAD + """
layout(std430, binding = 0) buffer O { float16_t o[]; };
void main()
{
	HALF m;
	coopMatLoadNV(m, o, 0u, 16u, false);
	coopMatStoreNV(m, o, 256u, 16u, false);
	o[gl_LocalInvocationID.x] = o[gl_LocalInvocationID.x] * float16_t(2.0);
}
"""

# One value as both A and B: no single Use fits.
CONFLICT = HEAD + """
layout(std430, binding = 0) buffer O { float o[]; };
layout(std430, binding = 1) readonly buffer A { float16_t a[]; };
void main()
{
	HALF fa;
	coopMatLoadNV(fa, a, 0u, 16u, false);
	ACC acc = coopMatMulAddNV(fa, fa, ACC(0.0));
	coopMatStoreNV(acc, o, 0u, 16u, false);
}
"""

# Private matrices (one an array indexed at run time), the length as a spec
# constant, element access, a select of two accumulators, negation.
PRIVATE = HEAD + """
layout(std430, binding = 0) buffer O { float16_t o[]; };
layout(std430, binding = 1) buffer F { float f[]; };
layout(push_constant) uniform P { uint k; } pc;
ACC gacc;
HALF fa[3];
void main()
{
	gacc = ACC(1.0);
	for (uint i = 0; i < 3; i++)
		coopMatLoadNV(fa[i], o, i * 256u, 16u, false);
	HALF b;
	coopMatLoadNV(b, o, 1000u, 16u, true);
	for (uint i = 0; i < uint(gacc.length()); i++)
		gacc[i] = gacc[i] * 2.0;
	gacc = coopMatMulAddNV(fa[pc.k], b, gacc);
	ACC x = pc.k > 1u ? gacc : ACC(3.0);
	coopMatStoreNV(-x, f, 0u, 16u, false);
}
"""

NO_MATRICES = """#version 450
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer O { float o[]; };
void main() { o[gl_LocalInvocationID.x] *= 2.0; }
"""

# The accumulator as a phi around a loop, a B operand that is a phi of a load
# and a constant, a copy of A, and that constant also used as an A operand:
# it must be cloned per Use. Valid NV SPIR-V (spirv-val accepts it).
PHI_ASM = """
OpCapability Shader
OpCapability Float16
OpCapability StorageBuffer16BitAccess
OpCapability VulkanMemoryModel
OpCapability CooperativeMatrixNV
OpExtension "SPV_NV_cooperative_matrix"
OpMemoryModel Logical Vulkan
OpEntryPoint GLCompute %main "main" %in %out
OpExecutionMode %main LocalSize 32 1 1
OpDecorate %rt ArrayStride 2
OpMemberDecorate %buf 0 Offset 0
OpDecorate %buf Block
OpDecorate %in DescriptorSet 0
OpDecorate %in Binding 0
OpDecorate %rtf ArrayStride 4
OpMemberDecorate %bufo 0 Offset 0
OpDecorate %bufo Block
OpDecorate %out DescriptorSet 0
OpDecorate %out Binding 1
%void = OpTypeVoid
%fn = OpTypeFunction %void
%bool = OpTypeBool
%uint = OpTypeInt 32 0
%float = OpTypeFloat 32
%half = OpTypeFloat 16
%uint_0 = OpConstant %uint 0
%uint_1 = OpConstant %uint 1
%uint_3 = OpConstant %uint 3
%uint_4 = OpConstant %uint 4
%uint_16 = OpConstant %uint 16
%false = OpConstantFalse %bool
%true = OpConstantTrue %bool
%hmat = OpTypeCooperativeMatrixNV %half %uint_3 %uint_16 %uint_16
%fmat = OpTypeCooperativeMatrixNV %float %uint_3 %uint_16 %uint_16
%float_0 = OpConstant %float 0
%half_1 = OpConstant %half 1.5
%fzero = OpConstantComposite %fmat %float_0
%hones = OpConstantComposite %hmat %half_1
%rt = OpTypeRuntimeArray %half
%buf = OpTypeStruct %rt
%p_buf = OpTypePointer StorageBuffer %buf
%in = OpVariable %p_buf StorageBuffer
%p_h = OpTypePointer StorageBuffer %half
%rtf = OpTypeRuntimeArray %float
%bufo = OpTypeStruct %rtf
%p_bufo = OpTypePointer StorageBuffer %bufo
%out = OpVariable %p_bufo StorageBuffer
%p_f = OpTypePointer StorageBuffer %float
%main = OpFunction %void None %fn
%entry = OpLabel
%pa = OpAccessChain %p_h %in %uint_0 %uint_0
%ma = OpCooperativeMatrixLoadNV %hmat %pa %uint_16 %false
OpBranch %loop
%loop = OpLabel
%acc = OpPhi %fmat %fzero %entry %next %cont
%i = OpPhi %uint %uint_0 %entry %i1 %cont
%cond = OpULessThan %bool %i %uint_4
OpLoopMerge %exit %cont None
OpBranchConditional %cond %body %exit
%body = OpLabel
%pb = OpAccessChain %p_h %in %uint_0 %i
%mb = OpCooperativeMatrixLoadNV %hmat %pb %uint_16 %true
%first = OpIEqual %bool %i %uint_0
OpSelectionMerge %join None
OpBranchConditional %first %then %join
%then = OpLabel
OpBranch %join
%join = OpLabel
%bsel = OpPhi %hmat %mb %then %hones %body
%acopy = OpCopyObject %hmat %ma
%next = OpCooperativeMatrixMulAddNV %fmat %acopy %bsel %acc
OpBranch %cont
%cont = OpLabel
%i1 = OpIAdd %uint %i %uint_1
OpBranch %loop
%exit = OpLabel
%mc = OpCooperativeMatrixLoadNV %hmat %pa %uint_16 %true
%fin = OpCooperativeMatrixMulAddNV %fmat %hones %mc %acc
%po = OpAccessChain %p_f %out %uint_0 %uint_0
OpCooperativeMatrixStoreNV %po %fin %uint_16 %false
OpReturn
OpFunctionEnd
"""


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def glsl(self, src, opt=False):
        comp = self.path('s.comp')
        with open(comp, 'w') as f:
            f.write(src)
        out = self.path('nv.spv')
        subprocess.run([GLSLANG, '-V', '--quiet', '--target-env', 'vulkan1.2'] + (['-Os'] if opt else []) +
                       ['-o', out, comp], check=True)
        return out

    def asm(self, src):
        with open(self.path('s.spvasm'), 'w') as f:
            f.write(src)
        out = self.path('nv.spv')
        subprocess.run([SPIRV_AS, '--target-env', 'vulkan1.2', '-o', out, self.path('s.spvasm')], check=True)
        return out

    def run_pass(self, inp, *flags, ok=True):
        out = self.path('out.spv')
        if '--check' not in flags:
            with open(out, 'wb') as f:
                f.write(b'stale')   # a failed run must not leave it
        args = [sys.executable, PASS] + list(flags) + [inp] + ([] if '--check' in flags else [out])
        p = subprocess.run(args, capture_output=True, text=True)
        if ok:
            self.assertEqual(p.returncode, 0, p.stderr)
            return Mod(read(inp if '--check' in flags else out))
        self.assertEqual(p.returncode, 1, "refused: " + p.stderr)
        if os.environ.get("SHOW_ERRORS"):
            print(p.stderr.strip(), file=sys.stderr)
        self.assertTrue(p.stderr.startswith('spv_coopmat_khr: '), p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        if '--check' not in flags:
            self.assertFalse(os.path.exists(out), 'output left behind')
        return p.stderr

    def rewritten(self, src, *flags, opt=False):
        return self.run_pass(self.glsl(src, opt), *flags)


def serialize(m, insts=None, bound=None):
    words = [0x07230203, m.version, 0, bound or m.bound, 0]
    for op, a in (insts if insts is not None else m.insts):
        words += [((len(a) + 1) << 16) | op] + a
    return struct.pack('<%dI' % len(words), *words)


def uses_of(m, component_op, width):
    """Uses of the KHR matrix types whose component is OpTypeFloat `width`."""
    return sorted(m.use(a[0]) for a in m.ops(KHR_TYPE)
                  if m.defs[a[1]][0] == component_op and m.defs[a[1]][1][1] == width)


class Rewrite(Case):
    def test_buffer_loop(self):
        nv = Mod(read(self.glsl(LOOP)))
        m = self.rewritten(LOOP)
        check_khr(self, m)
        self.assertEqual(uses_of(m, 22, 16), [0, 1])
        self.assertEqual(uses_of(m, 22, 32), [2])
        loads = m.ops(KHR_LOAD)
        self.assertEqual([(m.use(a[0]), m.const(a[3])) for a in loads], [(0, 0), (1, 1)])
        # Stride and pointer unchanged; the layout comes from "column major".
        self.assertEqual([(a[2], a[4]) for a in loads], [(a[2], a[3]) for a in nv.ops(5359)])
        store = m.ops(KHR_STORE)[0]
        self.assertEqual((m.use(m.type_of(store[1])), m.const(store[2])), (2, 0))
        zero = [a for a in m.ops(44) if m.defs[a[0]][0] == KHR_TYPE]
        self.assertEqual([m.use(a[0]) for a in zero], [2])

    def test_optimized_loop(self):
        check_khr(self, self.rewritten(LOOP, opt=True))

    def test_shared_arrays_and_conversion(self):
        m = self.rewritten(SHARED)
        check_khr(self, m)
        self.assertEqual(uses_of(m, 22, 16), [0, 1, 2])     # A, B and the f16 result
        self.assertEqual(uses_of(m, 22, 32), [2])
        conv = m.ops(115)
        self.assertEqual(len(conv), 1)
        self.assertEqual(m.matrix(conv[0][0])[4], 2)
        self.assertEqual(m.defs[m.matrix(conv[0][0])[0]][1][1], 16)
        self.assertEqual(m.use(m.type_of(conv[0][2])), 2)
        adds = [a for a in m.ops(129) if m.defs[a[0]][0] == KHR_TYPE]
        self.assertTrue(adds and all(m.type_of(x) == a[0] for a in adds for x in a[2:]))
        for a in m.ops(KHR_LOAD):   # from Workgroup uvec4 arrays, unchanged
            ptr = m.defs[m.type_of(a[2])][1]
            self.assertEqual(ptr[1], 4)
            self.assertEqual(m.defs[ptr[2]][0], 23)
        arrays = [a for a in m.ops(59) if m.defs[m.defs[a[0]][1][2]][0] == 28 and
                  m.defs[m.defs[m.defs[a[0]][1][2]][1][1]][0] == KHR_TYPE]
        self.assertEqual(sorted(m.use(a[0]) for a in arrays), [0, 1, 2])

    def test_private_select_length(self):
        m = self.rewritten(PRIVATE)
        check_khr(self, m)
        self.assertEqual(uses_of(m, 22, 16), [0, 1])
        private = sorted(m.use(a[0]) for a in m.ops(59) if a[2] == 6)
        self.assertEqual(private, [0, 2])                   # fa[3], gacc
        sel = [a for a in m.ops(169) if m.defs[a[0]][0] == KHR_TYPE]
        self.assertTrue(sel and all(m.use(a[0]) == 2 and m.type_of(a[3]) == m.type_of(a[4]) == a[0]
                                    for a in sel))
        length = [a for a in m.ops(52) if a[2] in (4460, 5362)]
        self.assertEqual([(a[2], m.use(a[3])) for a in length], [(4460, 2)])

    def test_phis_and_a_constant_of_two_uses(self):
        m = self.run_pass(self.asm(PHI_ASM))
        check_khr(self, m)
        phis = [a for a in m.ops(245) if m.defs[a[0]][0] == KHR_TYPE]
        self.assertEqual(sorted(m.use(a[0]) for a in phis), [1, 2])
        for a in phis:
            self.assertTrue(all(m.type_of(v) == a[0] for v in a[2::2]))
        clones = [a for a in m.ops(44) if m.defs[a[0]][0] == KHR_TYPE and m.matrix(a[0])[1:] and
                  m.defs[m.matrix(a[0])[0]][1][1] == 16]
        self.assertEqual(sorted(m.use(a[0]) for a in clones), [0, 1])
        self.assertEqual(len({a[2] for a in clones}), 1)    # both of the one scalar
        copy = m.ops(83)[0]
        self.assertEqual((m.use(copy[0]), m.use(m.type_of(copy[2]))), (0, 0))

    def test_bf16(self):
        f16 = self.rewritten(SHARED)
        m = self.rewritten(SHARED, '--bf16')
        check_khr(self, m)
        self.assertEqual([a[1:] for a in f16.ops(22) if a[1] == 16], [[16]])
        self.assertEqual([a[1:] for a in m.ops(22) if a[1] == 16], [[16, 0]])  # FP encoding BFloat16KHR
        self.assertLessEqual({5116, 5118}, caps(m))
        self.assertIn('SPV_KHR_bfloat16', exts(m))
        self.assertNotIn('SPV_KHR_bfloat16', exts(f16))
        half = [a[0] for a in m.ops(22) if a[1] == 16][0]
        self.assertEqual(sorted(a[2] for a in m.ops(43) if a[0] == half), [0x3f82, 0xc020])
        half = [a[0] for a in f16.ops(22) if a[1] == 16][0]
        self.assertEqual(sorted(a[2] for a in f16.ops(43) if a[0] == half), [0x3c0c, 0xc100])
        self.assertEqual(uses_of(m, 22, 16), [0, 1, 2])

    def test_bf16_constant_matrix(self):
        m = self.run_pass(self.asm(PHI_ASM), '--bf16')
        check_khr(self, m)
        half = [a[0] for a in m.ops(22) if a[1] == 16][0]
        self.assertEqual([a[2] for a in m.ops(43) if a[0] == half], [0x3fc0])     # 1.5

    def test_bf16_refuses_arithmetic(self):
        m = self.rewritten(F16_MATH)
        check_khr(self, m)
        self.assertEqual(uses_of(m, 22, 16), [2])       # met no MulAdd: an accumulator
        err = self.run_pass(self.glsl(F16_MATH), '--bf16', ok=False)
        self.assertIn('bfloat16', err)

    def test_rounding(self):
        sys.path.insert(0, os.path.dirname(PASS))
        import spv_coopmat_khr
        cases = {0x3c00: 0x3f80, 0x3c0c: 0x3f82, 0x3c04: 0x3f80, 0x3c14: 0x3f82, 0x7c00: 0x7f80,
                 0xfc00: 0xff80, 0x0001: 0x3380, 0xfbff: 0xc780, 0x0000: 0x0000, 0x8000: 0x8000}
        for h, b in cases.items():
            self.assertEqual(spv_coopmat_khr.f16_to_bf16(h), b, hex(h))
        nan = spv_coopmat_khr.f16_to_bf16(0x7e00)
        self.assertTrue((nan & 0x7f80) == 0x7f80 and nan & 0x7f)


class Refused(Case):
    def nv(self, src=LOOP):
        return Mod(read(self.glsl(src)))

    def refused(self, data, *flags):
        with open(self.path('bad.spv'), 'wb') as f:
            f.write(data)
        return self.run_pass(self.path('bad.spv'), *flags, ok=False)

    def test_truncated(self):
        data = read(self.glsl(LOOP))
        self.assertIn('not a whole', self.refused(data[:-2]))
        self.assertIn('past the end', self.refused(data[:-4] + struct.pack('<I', (3 << 16) | 56)))
        self.assertIn('not a whole', self.refused(b''))

    def test_bad_magic(self):
        data = read(self.glsl(LOOP))
        self.assertIn('magic', self.refused(b'\0\0\0\0' + data[4:]))

    def test_no_matrices(self):
        self.assertIn('nothing to rewrite', self.refused(read(self.glsl(NO_MATRICES))))

    def test_one_value_as_a_and_b(self):
        err = self.refused(read(self.glsl(CONFLICT)))
        self.assertIn('MatrixA', err)
        self.assertIn('MatrixB', err)

    def test_forward_reference(self):
        m = self.nv()
        insts = list(m.insts)
        n = next(k for k, (op, _) in enumerate(insts) if op == 5358)
        first_type = next(k for k, (op, _) in enumerate(insts) if op in TYPES)
        insts.insert(first_type, insts.pop(n))
        self.assertIn('forward reference', self.refused(serialize(m, insts)))

    def test_bound(self):
        m = self.nv()
        self.assertIn('bound', self.refused(serialize(m, bound=5)))

    def test_unknown_opcode(self):
        m = self.nv()
        insts = list(m.insts)
        insts.insert(next(k for k, (op, _) in enumerate(insts) if op == 14) + 1, (9999, []))
        self.assertIn('9999', self.refused(serialize(m, insts)))

    def test_matrix_in_a_struct(self):
        src = LOOP.replace('void main()', 'struct S { HALF m; };\nvoid main()').replace(
            'HALF fa, fb;', 'HALF fa, fb; S s; s.m = fa;')
        self.assertIn('struct', self.refused(read(self.glsl(src))))


class Check(Case):
    """The structural check (--check) catches what a broken rewrite would write."""

    def khr(self, src=LOOP, *flags):
        return self.rewritten(src, *flags)

    def refused(self, m, insts, *flags, bound=None):
        with open(self.path('bad.spv'), 'wb') as f:
            f.write(serialize(m, insts, bound))
        return self.run_pass(self.path('bad.spv'), '--check', *flags, ok=False)

    def type_of_use(self, m, use, width=16):
        return next(a for a in m.ops(KHR_TYPE) if m.use(a[0]) == use and m.defs[a[1]][1][1] == width)

    def test_accepts_the_rewrite(self):
        self.rewritten(LOOP)
        self.run_pass(self.path('out.spv'), '--check')

    def test_use_constant_after_the_type(self):
        m = self.khr()
        use = self.type_of_use(m, 1)[5]
        insts = list(m.insts)
        k = next(n for n, (op, a) in enumerate(insts) if op == 43 and a[1] == use)
        c = insts.pop(k)
        last = max(n for n, (op, _) in enumerate(insts) if op == KHR_TYPE)
        insts.insert(last + 1, c)
        self.assertIn('forward reference', self.refused(m, insts))

    def test_duplicate_type(self):
        m = self.khr()
        insts = list(m.insts)
        t = self.type_of_use(m, 0)
        k = next(n for n, (op, a) in enumerate(insts) if op == KHR_TYPE and a is t)
        insts.insert(k + 1, (KHR_TYPE, [m.bound] + t[1:]))
        self.assertIn('unique', self.refused(m, insts, bound=m.bound + 1))

    def test_swapped_uses(self):
        m = self.khr()
        a, b = self.type_of_use(m, 0), self.type_of_use(m, 1)
        insts = [(op, x[:5] + [b[5]] if x is a else x[:5] + [a[5]] if x is b else x) for op, x in m.insts]
        self.assertIn('MatrixA', self.refused(m, insts))

    def test_nv_capability_left(self):
        m = self.khr()
        insts = [(17, [5357])] + list(m.insts)
        self.assertIn('NV', self.refused(m, insts))

    def test_bad_layout(self):
        m = self.khr()
        sixteen = next(a[1] for a in m.ops(43) if a[2:] == [16] and m.defs[a[0]][1][1] == 32)
        insts = [(op, a[:3] + [sixteen] + a[4:] if op == KHR_LOAD else a) for op, a in m.insts]
        self.assertIn('layout', self.refused(m, insts))

    def test_phi_of_the_wrong_use(self):
        m = self.run_pass(self.asm(PHI_ASM))
        b = self.type_of_use(m, 1)[0]
        insts = [(op, [b] + a[1:] if op == 245 and m.defs[a[0]][0] == KHR_TYPE and m.use(a[0]) == 2 else a)
                 for op, a in m.insts]
        self.refused(m, insts)

    def test_bf16_without_encoding(self):
        m = self.khr(SHARED, '--bf16')
        insts = [(op, a[:2] if op == 22 and a[1:] == [16, 0] else a) for op, a in m.insts]
        self.assertIn('BFloat16KHR', self.refused(m, insts, '--bf16'))


class Built(Case):
    """The modules the build embeds."""

    def built(self, name):
        path = next((p for p in BUILT if os.path.basename(p) == name), None)
        if path is None:
            path = next((os.path.join(os.path.dirname(p), name) for p in BUILT
                         if os.path.exists(os.path.join(os.path.dirname(p), name))), None)
        if path is None:
            self.skipTest(name + ' not given')
        return path, Mod(read(path))

    def load_layouts(self, m):
        """{(Use, layout)} of the KHR loads: row-major 0, column-major 1."""
        return {(m.use(a[0]), m.const(a[3])) for a in m.ops(KHR_LOAD)}

    def nv_column_major(self, m):
        """The column-major operands of the NV loads (True, False or both)."""
        return {m.defs[a[4]][0] == 41 for a in m.ops(5359)}

    def local_size(self, m):
        return next(a[2] for a in m.ops(16) if a[1] == 17)

    def test_khr_f16(self):
        path, m = self.built('matmul_cm_khr.f16.spv')
        check_khr(self, m)
        self.assertEqual(self.local_size(m), 128)       # 2x2 subgroups of 64x64
        self.assertEqual(uses_of(m, 22, 16), [0, 1, 2])
        self.assertEqual(uses_of(m, 22, 32), [2])
        self.assertEqual([a[1:] for a in m.ops(22) if a[1] == 16], [[16]])
        self.run_pass(path, '--check')

    def test_khr_bf16(self):
        path, m = self.built('matmul_cm_khr.bf16.spv')
        check_khr(self, m)
        self.assertEqual(self.local_size(m), 128)
        self.assertEqual([a[1:] for a in m.ops(22) if a[1] == 16], [[16, 0]])
        self.assertLessEqual({5116, 5118}, caps(m))
        self.run_pass(path, '--check', '--bf16')

    def test_nv_unchanged(self):
        _, m = self.built('matmul_cm.f16.spv')
        self.assertIn(5357, caps(m))
        self.assertEqual(self.local_size(m), 256)       # 2x4 subgroups of 64x32
        self.assertFalse(m.ops(KHR_TYPE))
        self.assertEqual(self.nv_column_major(m), {False})

    # The transposed layouts (matmul_cm.glsl with CM_TB or CM_TA): the
    # transposed operand's fragments are loaded column-major, the other's
    # row-major, as NN's are.
    LAYOUTS = {'': {(0, 0), (1, 0)}, '_nt': {(0, 0), (1, 1)}, '_tn': {(0, 1), (1, 0)}}

    def test_khr_layouts(self):
        for lay, loads in self.LAYOUTS.items():
            for v in ('f16', 'bf16'):
                with self.subTest(layout=lay, variant=v):
                    path, m = self.built('matmul_cm_khr%s.%s.spv' % (lay, v))
                    check_khr(self, m)
                    self.assertEqual(self.local_size(m), 128)
                    self.assertEqual(uses_of(m, 22, 16), [0, 1, 2])
                    self.assertEqual(uses_of(m, 22, 32), [2])
                    self.assertEqual(self.load_layouts(m), loads)
                    self.assertEqual({m.const(a[2]) for a in m.ops(KHR_STORE)}, {0})
                    encoding = [[16, 0]] if v == 'bf16' else [[16]]
                    self.assertEqual([a[1:] for a in m.ops(22) if a[1] == 16], encoding)
                    self.run_pass(path, '--check', *(['--bf16'] if v == 'bf16' else []))

    # The f32-output modules (matmul_cm.glsl with CM_OUT_F32, for autocast;
    # also the 128x64 ones, matmul_cm_khr_f32out_n64*):
    # 16-bit A and B, no 16-bit accumulator (nothing is converted), the f32
    # accumulators stored as they are.
    def test_khr_f32_output(self):
        for lay, loads in self.LAYOUTS.items():
            for v, narrow in (('f16', ''), ('bf16', ''), ('f16', '_n64'), ('bf16', '_n64')):
                with self.subTest(layout=lay, variant=v, narrow=narrow):
                    path, m = self.built('matmul_cm_khr_f32out%s%s.%s.spv' % (narrow, lay, v))
                    check_khr(self, m)
                    # the 128x64 tile has two subgroups, the 128x128 four
                    self.assertEqual(self.local_size(m), 64 if narrow else 128)
                    self.assertEqual(uses_of(m, 22, 16), [0, 1])
                    self.assertEqual(uses_of(m, 22, 32), [2])
                    self.assertEqual(self.load_layouts(m), loads)
                    stores = m.ops(KHR_STORE)
                    self.assertEqual({m.const(a[2]) for a in stores}, {0})
                    for a in stores:
                        t = m.type_of(a[1])
                        self.assertEqual(m.use(t), 2)
                        self.assertEqual(m.defs[m.defs[t][1][1]][1][1], 32)
                    self.assertFalse([a for a in m.ops(115) if m.defs[a[0]][0] == KHR_TYPE],
                                     'a matrix is converted')
                    encoding = [[16, 0]] if v == 'bf16' else [[16]]
                    self.assertEqual([a[1:] for a in m.ops(22) if a[1] == 16], encoding)
                    self.run_pass(path, '--check', *(['--bf16'] if v == 'bf16' else []))

    # The f32-output modules with the epilogue in their stores
    # (matmul_cm_khr_f32out_epi*): the same, plus the bias and mask loaded
    # as f32 accumulators (row-major), and no OpCooperativeMatrixLengthKHR
    # (the driver crashed creating a pipeline whose loops it bounded).
    def test_khr_f32_output_epilogue(self):
        for lay, loads in self.LAYOUTS.items():
            for v in ('f16', 'bf16'):
                with self.subTest(layout=lay, variant=v):
                    path, m = self.built('matmul_cm_khr_f32out_epi%s.%s.spv' % (lay, v))
                    check_khr(self, m)
                    self.assertEqual(self.local_size(m), 128)
                    self.assertEqual(self.load_layouts(m), loads | {(2, 0)})
                    self.assertFalse(m.ops(KHR_LENGTH))
                    self.assertEqual({m.use(m.type_of(a[1])) for a in m.ops(KHR_STORE)}, {2})
                    self.run_pass(path, '--check', *(['--bf16'] if v == 'bf16' else []))

    def test_nv_layouts(self):
        for lay in ('_nt', '_tn'):
            with self.subTest(layout=lay):
                _, m = self.built('matmul_cm%s.f16.spv' % lay)
                self.assertIn(5357, caps(m))
                self.assertEqual(self.local_size(m), 256)
                self.assertFalse(m.ops(KHR_TYPE))
                self.assertEqual(self.nv_column_major(m), {False, True})


if __name__ == '__main__':
    PASS, GLSLANG, SPIRV_AS = sys.argv[1:4]
    BUILT = sys.argv[4:]
    unittest.main(argv=[sys.argv[0], '-v'])
