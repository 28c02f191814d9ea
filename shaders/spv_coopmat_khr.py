#!/usr/bin/env python3
"""spv_coopmat_khr: glslang 12's GL_NV_cooperative_matrix SPIR-V rewritten
into SPV_KHR_cooperative_matrix, and with --bf16 its 16-bit floats made
bfloat16 (SPV_KHR_bfloat16), then checked (spv_check.py) before anything is
written. A build step of shaders/meson.build; the mapping, the pitfalls and
why are in the shared TENSOR_CORES.md and docs/architecture.md.

  spv_coopmat_khr.py [--bf16] IN.spv OUT.spv   rewrite (IN holds NV matrices)
  spv_coopmat_khr.py --check [--bf16] KHR.spv  check a rewritten module only

The instructions map one to one, but an NV matrix type has no Use (MatrixA,
MatrixB, Accumulator) and a KHR one must: glslang gives A, B and a 16-bit
result one NV type. So each value's Use is inferred: values that must share
a type (a variable and what is loaded from or stored to it, an access chain
and its base, a phi or select and its operands, a copy, a conversion, a
composite and its parts, arithmetic) are joined; the operands of each MulAdd
seed their class (a: MatrixA, b: MatrixB, c and the result: Accumulator);
a class that meets no MulAdd is an accumulator; one seeded twice differently
is refused. Constant matrices (OpConstantComposite, OpConstantNull) are
cloned per Use at each place they are used. Every type holding matrices
(arrays, pointers) then gets one KHR variant per Use, emitted where the NV
type stood, after the i32 Use constants it names.

Exit status 0, or 1 with one line on stderr naming the file and the problem
(and no output file) when the input is not a module this pass understands
or the result would not pass the check."""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spv_check  # noqa: E402
from spv_module import OP, Inst, Module, SpvError, encode_string, parse, write  # noqa: E402

USE_A, USE_B, USE_ACC = 0, 1, 2
USE_NAMES = spv_check.USE_NAMES
NV_TYPE, NV_LOAD, NV_STORE, NV_MULADD, NV_LENGTH = 5358, 5359, 5360, 5361, 5362
KHR_TYPE, KHR_LOAD, KHR_STORE, KHR_MULADD, KHR_LENGTH = 4456, 4457, 4458, 4459, 4460
_POLY_CONSTS = (OP.OpConstantComposite, OP.OpConstantNull, OP.OpSpecConstantComposite, OP.OpUndef)


def f16_to_bf16(h):
    """The bfloat16 bits nearest (ties to even) the IEEE half `h`; NaNs stay
    NaN (quiet), infinities infinite."""
    x = struct.unpack('<e', struct.pack('<H', h & 0xffff))[0]
    b = struct.unpack('<I', struct.pack('<f', x))[0]
    if x != x:
        return (b >> 16) | 0x40
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff


class _Rewrite:
    """One rewrite of `mod`; run() returns the new Module."""

    def __init__(self, mod, bf16):
        self.mod, self.bf16 = mod, bf16
        self.defs, self.names = mod.defs(), mod.names()
        self.next_id = mod.bound
        self.parent, self.seeds, self.nodes = {}, {}, set()
        self.sites = {}         # (inst index, operand index) -> (constant, node)
        self.lengths = []       # OpCooperativeMatrixLengthNV instructions
        self.need, self.clones = {}, {}
        self.vid, self.cid, self.ints = {}, {}, {}
        self.first_nv = None

    def new_id(self):
        self.next_id += 1
        return self.next_id - 1

    def desc(self, x):
        n = self.names.get(x)
        return '%%%d ("%s")' % (x, n) if n else '%%%d' % x

    def type_of(self, x):
        d = self.defs.get(x)
        return d.type_id if d is not None else None

    # ---- which types hold matrices -------------------------------------

    def find_matrix_types(self):
        self.mtypes = set()
        for n, i in enumerate(self.mod.insts):
            if i.op == NV_TYPE:
                self.mtypes.add(i.result)
                if self.first_nv is None:
                    self.first_nv = n
            elif i.op in (OP.OpTypeArray, OP.OpTypeRuntimeArray) and i.ops[1] in self.mtypes:
                self.mtypes.add(i.result)
            elif i.op == OP.OpTypePointer and i.ops[2] in self.mtypes:
                self.mtypes.add(i.result)
            elif i.op in (OP.OpTypeStruct, OP.OpTypeFunction) and set(i.ops[1:]) & self.mtypes:
                raise SpvError('%s %s holds cooperative matrices: only arrays of them and pointers to '
                               'them are supported (keep matrices out of structs and function '
                               'signatures)' % (i.name, self.desc(i.result)))
        if self.first_nv is None:
            raise SpvError('no NV cooperative matrix in the module: nothing to rewrite')
        for i in self.mod.insts:
            if i.op in (OP.OpDecorate, OP.OpMemberDecorate, OP.OpDecorateId) and i.ops[0] in self.mtypes:
                raise SpvError('decorated matrix type %s is not supported' % self.desc(i.ops[0]))
        self.poly = {i.result for i in self.mod.insts[:self.func_start()]
                     if i.op in _POLY_CONSTS and i.type_id in self.mtypes}

    def func_start(self):
        for n, i in enumerate(self.mod.insts):
            if i.op == OP.OpFunction:
                return n
        return len(self.mod.insts)

    # ---- union-find over values and constant sites ---------------------

    def find(self, x):
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, a, b):
        self.nodes.update((a, b))
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.seeds.setdefault(ra, []).extend(self.seeds.pop(rb, []))

    def seed(self, node, use, why):
        self.nodes.add(node)
        self.seeds.setdefault(self.find(node), []).append((use, why))

    def node(self, n, k, x):
        """The node for operand k of instruction n naming x: a site of its
        own for a constant matrix (cloned per Use), else the value x."""
        if x not in self.poly:
            return x
        site = ('site', n, k)
        self.sites[(n, k)] = (x, site)
        return site

    def join_instruction(self, n, i):
        if i.op == OP.OpFunctionCall or i.op in (OP.OpFunction, OP.OpFunctionParameter):
            mats = [w for _, w in i.ids() if w in self.mtypes or self.type_of(w) in self.mtypes]
            if mats:
                raise SpvError('%s %s passes cooperative matrices across a function call: not supported '
                               '(inline the function)' % (i.name, self.desc(i.result)))
            return
        if i.op == NV_MULADD:
            at = 'of OpCooperativeMatrixMulAddNV ' + self.desc(i.ops[1])
            for k, use, what in ((2, USE_A, 'A'), (3, USE_B, 'B'), (4, USE_ACC, 'C')):
                self.seed(self.node(n, k, i.ops[k]), use, 'operand %s %s' % (what, at))
            self.union(i.ops[1], self.node(n, 4, i.ops[4]))
            return
        if i.op == NV_LENGTH:
            self.lengths.append(i)
            return
        if i.op in (NV_LOAD, NV_STORE):
            return
        mats = [self.node(n, k, w) for k, w in i.ids()
                if i.kinds[k] == 'i' and self.type_of(w) in self.mtypes]
        if i.type_id in self.mtypes:
            mats.insert(0, i.result)
        for m in mats[1:]:
            self.union(mats[0], m)

    def use_of(self, x):
        seeds = self.seeds.get(self.find(x), [])
        uses = sorted({u for u, _ in seeds})
        if len(uses) > 1:
            first = {u: why for u, why in reversed(seeds)}
            vals = sorted(v for v in self.nodes if not isinstance(v, tuple) and self.find(v) == self.find(x))
            raise SpvError('%s share one Use but are used as %s (%s) and as %s (%s): give the fragments '
                           'of each MulAdd operand variables of their own' % (
                               ', '.join(self.desc(v) for v in vals[:4]) or self.desc(x),
                               USE_NAMES[uses[0]], first[uses[0]], USE_NAMES[uses[1]], first[uses[1]]))
        return uses[0] if uses else USE_ACC

    # ---- what the output needs ------------------------------------------

    def need_type(self, t, use):
        if use in self.need.setdefault(t, set()):
            return
        self.need[t].add(use)
        d = self.defs[t]
        if d.op in (OP.OpTypeArray, OP.OpTypeRuntimeArray):
            self.need_type(d.ops[1], use)
        elif d.op == OP.OpTypePointer:
            self.need_type(d.ops[2], use)

    def need_const(self, c, use):
        if (c, use) in self.clones:
            return
        self.clones[(c, use)] = None
        self.need_type(self.type_of(c), use)
        for _, w in self.defs[c].ids()[1:]:
            if w in self.poly:
                self.need_const(w, use)

    @staticmethod
    def length_type(i):
        """Where the matrix type is in a length: OpCooperativeMatrixLengthNV's
        operand, or that of an OpSpecConstantOp computing one."""
        return 3 if i.op == OP.OpSpecConstantOp else 2

    def length_use(self, i):
        uses = self.need.get(i.ops[self.length_type(i)], set())
        if len(uses) > 1:
            raise SpvError('OpCooperativeMatrixLengthNV %s: its matrix type serves several Uses (%s); the '
                           'KHR length depends on the Use' % (self.desc(i.ops[1]),
                                                             ', '.join(USE_NAMES[u] for u in sorted(uses))))
        return min(uses) if uses else USE_ACC

    def plan(self):
        start = self.func_start()
        for n, i in enumerate(self.mod.insts):
            if n >= start or i.op == OP.OpVariable:
                self.join_instruction(n, i)
            elif i.op == OP.OpSpecConstantOp and i.ops[2] == NV_LENGTH:
                self.lengths.append(i)
        for n, i in enumerate(self.mod.insts):
            if (n >= start or i.op == OP.OpVariable) and i.type_id in self.mtypes:
                self.need_type(i.type_id, self.use_of(i.result))
        for (c, site) in self.sites.values():
            self.need_const(c, self.use_of(site))
        self.length_uses = {id(i): self.length_use(i) for i in self.lengths}
        for i in self.lengths:
            self.need_type(i.ops[self.length_type(i)], self.length_uses[id(i)])
        for t in sorted(self.need):
            for u in sorted(self.need[t]):
                self.vid[(t, u)] = self.new_id()
        for key in sorted(self.clones):
            self.cid[key] = self.new_id()

    # ---- emitting --------------------------------------------------------

    def int_const(self, value):
        """An i32 constant `value` of the scope constant's integer type,
        defined before the first matrix type: reused, else made (helpers)."""
        if value in self.ints:
            return self.ints[value][0]
        nv = self.mod.insts[self.first_nv]
        itype = self.type_of(nv.ops[2])
        td = self.defs.get(itype)
        if td is None or td.op != OP.OpTypeInt or td.ops[1] != 32:
            raise SpvError('the scope of matrix type %s is not a 32-bit integer constant' % self.desc(nv.result))
        for i in self.mod.insts[:self.first_nv]:
            if i.op == OP.OpConstant and i.ops[0] == itype and i.ops[2:] == [value]:
                self.ints[value] = (i.ops[1], None)
                return i.ops[1]
        cid = self.new_id()
        self.ints[value] = (cid, Inst(OP.OpConstant, [itype, cid, value]))
        return cid

    def layout(self, colmajor, what):
        d = self.defs.get(colmajor)
        if d is None or d.op not in (OP.OpConstantTrue, OP.OpConstantFalse):
            raise SpvError('%s: the column-major operand %s is not a constant true or false' %
                           (what, self.desc(colmajor)))
        return self.int_const(1 if d.op == OP.OpConstantTrue else 0)

    def variant(self, i, use):
        v = self.vid[(i.result, use)]
        if i.op == NV_TYPE:
            return Inst(KHR_TYPE, [v] + i.ops[1:] + [self.int_const(use)])
        if i.op == OP.OpTypePointer:
            return Inst(i.op, [v, i.ops[1], self.vid[(i.ops[2], use)]])
        return Inst(i.op, [v, self.vid[(i.ops[1], use)]] + i.ops[2:])

    def clone(self, i, use):
        ops = [self.vid[(i.ops[0], use)], self.cid[(i.result, use)]]
        ops += [self.cid[(w, use)] if w in self.poly else w for w in i.ops[2:]]
        return Inst(i.op, ops)

    def muladd_signs(self, i):
        mask = 0
        for k, bit in ((2, 1), (3, 2), (4, 4), (0, 8)):
            t = i.ops[0] if k == 0 else self.type_of(i.ops[k])
            comp = self.defs[self.defs[t].ops[1]]
            if comp.op == OP.OpTypeInt and comp.ops[2] == 1:
                mask |= bit
        return [mask] if mask else []

    def function_inst(self, n, i):
        ops = list(i.ops)
        if i.type_id in self.mtypes:
            ops[0] = self.vid[(ops[0], self.use_of(i.result))]
        for k in range(len(ops)):
            if (n, k) in self.sites:
                c, site = self.sites[(n, k)]
                ops[k] = self.cid[(c, self.use_of(site))]
        what = '%s %s' % (i.name, self.desc(i.result) if i.result else '')
        if i.op == NV_LOAD:
            return Inst(KHR_LOAD, ops[:3] + [self.layout(ops[4], what), ops[3]] + ops[5:])
        if i.op == NV_STORE:
            return Inst(KHR_STORE, ops[:2] + [self.layout(ops[3], what), ops[2]] + ops[4:])
        if i.op == NV_MULADD:
            return Inst(KHR_MULADD, ops + self.muladd_signs(i))
        if i.op == NV_LENGTH:
            ops[2] = self.vid[(ops[2], self.length_uses[id(i)])]
            return Inst(KHR_LENGTH, ops)
        return Inst(i.op, ops)

    def global_inst(self, n, i, out):
        """Append what instruction n of the module-level sections becomes."""
        if i.op == OP.OpCapability and i.ops[0] == spv_check.CAP_NV:
            out.append(Inst(OP.OpCapability, [spv_check.CAP_KHR]))
            if self.bf16:
                out += [Inst(OP.OpCapability, [c]) for c in (spv_check.CAP_BF16, spv_check.CAP_BF16_CM)]
        elif i.op == OP.OpExtension and i.ops == encode_string(spv_check.EXT_NV):
            out.append(Inst(OP.OpExtension, encode_string(spv_check.EXT_KHR)))
            if self.bf16:
                out.append(Inst(OP.OpExtension, encode_string(spv_check.EXT_BF16)))
        elif i.op in (OP.OpName, OP.OpMemberName) and i.ops[0] in self.mtypes:
            pass                        # names of replaced types
        elif i.result in self.mtypes:
            if n == self.first_nv:
                out += [inst for _, inst in sorted(self.ints.values(), key=lambda p: p[0]) if inst]
            out += [self.variant(i, u) for u in sorted(self.need.get(i.result, ()))]
        elif i.result in self.poly:
            out += [self.clone(i, u) for (c, u) in sorted(self.clones) if c == i.result]
        elif self.bf16 and i.op == OP.OpTypeFloat and i.ops[1] == 16:
            out.append(Inst(OP.OpTypeFloat, [i.result, 16, 0]))
        elif self.bf16 and i.op in (OP.OpConstant, OP.OpSpecConstant) and i.ops[0] in self.halves:
            out.append(Inst(i.op, i.ops[:2] + [f16_to_bf16(i.ops[2])]))
        elif i.op == OP.OpVariable:
            out.append(self.function_inst(n, i))
        elif i.op == OP.OpSpecConstantOp and i.ops[2] == NV_LENGTH:
            out.append(Inst(i.op, i.ops[:2] + [KHR_LENGTH, self.vid[(i.ops[3], self.length_uses[id(i)])]]))
        else:
            out.append(i)

    def run(self):
        if self.mod.version < 0x10300:
            raise SpvError('SPIR-V 1.%d: KHR cooperative matrices need 1.3 or later (compile with '
                           '--target-env vulkan1.2)' % ((self.mod.version >> 8) & 0xff))
        spv_check.check(self.mod, 'nv')
        self.halves = {i.result for i in self.mod.insts if i.op == OP.OpTypeFloat and i.ops[1] == 16}
        if self.bf16 and not self.halves:
            raise SpvError('--bf16: the module has no 16-bit float to make bfloat16')
        self.find_matrix_types()
        self.plan()
        # Layout constants are made while functions are rewritten, but must be
        # emitted with the Use constants: rewrite functions first.
        start = self.func_start()
        body = [self.function_inst(n, i) for n, i in enumerate(self.mod.insts) if n >= start]
        for u in sorted({u for t, u in self.vid if self.defs[t].op == NV_TYPE}):
            self.int_const(u)
        head = []
        for n, i in enumerate(self.mod.insts[:start]):
            self.global_inst(n, i, head)
        out = Module(self.mod.version, self.mod.generator, self.next_id, head + body)
        spv_check.check(out, 'khr', self.bf16)
        return out


def rewrite(mod, bf16=False):
    """The KHR (bf16: bfloat16) form of `mod`, a module glslang wrote with NV
    cooperative matrices, checked by spv_check. Raises SpvError, saying why,
    when the input is malformed or uses what the pass does not support."""
    return _Rewrite(mod, bf16).run()


def main(argv=None):
    """The command line (module docstring). Returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--bf16', action='store_true', help='make the 16-bit floats bfloat16')
    ap.add_argument('--check', action='store_true', help='only check INPUT, a rewritten module')
    ap.add_argument('input')
    ap.add_argument('output', nargs='?')
    a = ap.parse_args(argv)
    if not a.check and not a.output:
        ap.error('OUT.spv is needed unless --check')
    try:
        with open(a.input, 'rb') as f:
            mod = parse(f.read())
        if a.check:
            spv_check.check(mod, 'khr', a.bf16)
            return 0
        data = write(rewrite(mod, a.bf16))
    except Exception as e:      # noqa: BLE001 - one line, and no output, whatever failed
        what = e if isinstance(e, (SpvError, OSError)) else 'internal error: %s: %s' % (type(e).__name__, e)
        print('spv_coopmat_khr: %s: %s' % (a.input, what), file=sys.stderr)
        if a.output and os.path.exists(a.output):
            os.unlink(a.output)     # a stale module must not be embedded
        return 1
    tmp = a.output + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(data)
    os.replace(tmp, a.output)
    return 0


if __name__ == '__main__':
    sys.exit(main())
