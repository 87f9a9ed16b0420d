// Every stage is dumpable, and the bufferized code allocates nothing on the
// heap and nothing inside a loop: the tiles become allocas at function entry.
// RUN: attnkit-compile --emit=naive --heads 8 --kv-heads 2 --head-dim 128 --mask window:64 --dtype bf16 --layout bshd | FileCheck %s --check-prefix=NAIVE
// RUN: attnkit-compile --emit=fused --heads 8 --kv-heads 2 --head-dim 128 --mask window:64 | FileCheck %s --check-prefix=FUSED
// RUN: attnkit-compile --emit=vectorized --heads 8 --kv-heads 2 --head-dim 128 --mask causal | FileCheck %s --check-prefix=VEC
// RUN: attnkit-compile --emit=vectorized --heads 8 --kv-heads 2 --head-dim 128 --q-len 1 --mask causal --dtype bf16 | FileCheck %s --check-prefix=DECODE
// RUN: attnkit-compile --emit=llvm --head-dim 64 --mask none | FileCheck %s --check-prefix=LLVM
// RUN: attnkit-compile --emit=vectorized --heads 8 --kv-heads 2 --head-dim 127 --mask causal --dtype bf16 --bf16-dot | FileCheck %s --check-prefix=DOT
// RUN: attnkit-compile --emit=llvm --heads 8 --kv-heads 2 --head-dim 64 --q-len 1 --dtype bf16 --bf16-dot | FileCheck %s --check-prefix=DOTLLVM
// RUN: %expect-exit 2 attnkit-compile --emit=vectorized --head-dim 64 --bf16-dot 2>&1 | FileCheck %s --check-prefix=DOTF32

// NAIVE: func.func @attention(%arg0: memref<4x?x128xbf16
// NAIVE: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// NAIVE: math.exp
// NAIVE: arith.divf
// NAIVE: iterator_types = ["parallel", "parallel", "reduction", "parallel"]

// Window: the KV loop starts at max(0, p0 + i0 - W + 1).
// FUSED: %[[P:.*]] = arith.addi %arg11, %arg9 : index
// FUSED: %[[LOW:.*]] = arith.subi %[[P]], %arg10 : index
// FUSED: %[[LO1:.*]] = arith.addi %[[LOW]], %{{.*}} : index
// FUSED: %[[LO:.*]] = arith.maxsi %{{.*}}, %[[LO1]] : index
// FUSED: scf.for %{{.*}} = %[[LO]] to

// The vectorized stage: tiles are allocas at function entry (Qᵀ packed
// [D][R], Sᵀ [BK][R], accᵀ [D][R] for R = 4 heads x 16 rows), nothing on
// the heap, no copies; QKᵀ is a d-loop carrying 4 keys x 4 row-vectors = 16
// vector<16xf32> accumulators, then the online softmax on vectors, then P·V
// as a key loop carrying 16 accumulators (4 dims x 4 row-vectors).
// VEC-DAG: memref.alloca() {{.*}} : memref<128x64xf32>
// VEC-DAG: memref.alloca() {{.*}} : memref<64x64xf32>
// VEC-DAG: memref.alloca() {{.*}} : memref<128x64xf32>
// VEC-NOT: memref.alloc(
// VEC-NOT: memref.copy
// VEC: scf.for %[[I0:.*]] = %c0 to %{{.*}} step %c16 {
// VEC-NOT: memref.alloca
// VEC: scf.for %[[J0:.*]] = %c0 to %{{.*}} step %c64 {
// VEC: scf.for {{.*}} = %c0 to %c128 step %c1 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// VEC-COUNT-16: vector.fma
// VEC: arith.cmpf ogt, {{.*}} : vector<16xf32>
// VEC-NEXT: arith.select {{.*}} : vector<16xi1>, vector<16xf32>
// VEC: scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// VEC-COUNT-16: vector.fma
// VEC-NOT: math.exp2
// VEC-NOT: memref.alloca
// VEC-NOT: memref.alloc(
// VEC: return

// Decode (--q-len 1): query tile 1, so R = 4 rows; q widened from bf16 once
// per query, K streamed at full width (bf16 -> f32 on load, prefetched a tile
// ahead) in blocks of 4 rows x 4 keys whose 16 dot products are reduced
// together by shuffles (no per-score horizontal reduction), scores S[R][64]
// with the softmax along keys.
// DECODE-DAG: memref.alloca() {{.*}} : memref<4x64xf32>
// DECODE-DAG: memref.alloca() {{.*}} : memref<4x128xf32>
// DECODE: scf.for %{{.*}} = %c0 to %{{.*}} step %c1 {
// DECODE: vector.load %arg0{{.*}} vector<16xbf16>
// DECODE: scf.for %[[J0:.*]] = %{{.*}} to %{{.*}} step %c64 {
// DECODE: scf.for %[[JJ:.*]] = %c0 to %{{.*}} step %c4
// DECODE: memref.prefetch %arg1
// DECODE: vector.load %arg1{{.*}} vector<16xbf16>
// DECODE: arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
// DECODE: vector.fma
// DECODE: vector.shuffle
// DECODE-NOT: vector.reduction <add>
// DECODE: vector.store {{.*}} vector<4xf32>
// DECODE: vector.extract_strided_slice {{.*}} {offsets = [8], sizes = [8], strides = [1]} : vector<16xf32> to vector<8xf32>
// DECODE-NOT: vector.reduction <max
// DECODE: memref.prefetch %arg2
// DECODE-NOT: memref.alloc(

// LLVM: llvm.func @attention(
// LLVM: llvm.func @_mlir_ciface_attention(

// --bf16-dot, prefill: bf16 Q packed in pairs of dims ([ceil(D/2)][2R] bf16;
// D 127: 64 pairs, the last one padded with 0), QK^T a loop over the 63 full
// pairs carrying 16 accumulators of x86vector.avx512.dot, each key's pair
// broadcast as one i32, then the odd dim's step with (k, 0).
// DOT-DAG: memref.alloca() {{.*}} : memref<64x128xbf16>
// DOT: scf.for {{.*}} = %c0 to %c63 step %c1 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// DOT: vector.load {{.*}} : memref<64x128xbf16>, vector<32xbf16>
// DOT: vector.bitcast {{.*}} : vector<2xbf16> to vector<1xi32>
// DOT: vector.broadcast {{.*}} : i32 to vector<16xi32>
// DOT-COUNT-16: x86vector.avx512.dot
// DOT: vector.from_elements {{.*}} : vector<2xbf16>
// DOT-COUNT-16: x86vector.avx512.dot
// DOT-NOT: vector.fma {{.*}} bf16

// Decode: K rows dotted 32 bf16 at a time against q as stored, down to the
// LLVM intrinsic.
// DOTLLVM: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"

// DOTF32: attnkit-compile: --bf16-dot: needs --dtype bf16 with bf16 K/V (got --dtype=f32)
