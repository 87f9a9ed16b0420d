// Every stage is dumpable, and the bufferized code allocates nothing on the
// heap and nothing inside a loop: the tiles become allocas at function entry.
// RUN: attnkit-compile --stage naive --heads 8 --kv-heads 2 --head-dim 128 --mask window:64 --dtype bf16 --layout bshd | FileCheck %s --check-prefix=NAIVE
// RUN: attnkit-compile --stage fused --heads 8 --kv-heads 2 --head-dim 128 --mask window:64 | FileCheck %s --check-prefix=FUSED
// RUN: attnkit-compile --stage vectorized --heads 8 --kv-heads 2 --head-dim 128 --mask causal | FileCheck %s --check-prefix=VEC
// RUN: attnkit-compile --stage llvm --head-dim 64 --mask none | FileCheck %s --check-prefix=LLVM

// NAIVE: func.func @attention(%arg0: memref<4x?x128xbf16
// NAIVE: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// NAIVE: math.exp
// NAIVE: arith.divf
// NAIVE: iterator_types = ["parallel", "parallel", "reduction", "parallel"]

// Window: the KV loop starts at max(0, p0 + i0 - W + 1).
// FUSED: %[[P:.*]] = arith.addi %arg9, %arg7 : index
// FUSED: %[[LOW:.*]] = arith.subi %[[P]], %arg8 : index
// FUSED: %[[LO1:.*]] = arith.addi %[[LOW]], %{{.*}} : index
// FUSED: %[[LO:.*]] = arith.maxsi %{{.*}}, %[[LO1]] : index
// FUSED: scf.for %{{.*}} = %[[LO]] to

// VEC: memref.alloca() {{.*}} : memref<4x16x64xf32>
// VEC-NOT: memref.alloc(
// VEC-NOT: memref.copy
// VEC: scf.for
// VEC-NOT: memref.alloca
// VEC-NOT: memref.alloc(
// VEC-NOT: math.exp2
// VEC: return

// LLVM: llvm.func @attention(
// LLVM: llvm.func @_mlir_ciface_attention(
