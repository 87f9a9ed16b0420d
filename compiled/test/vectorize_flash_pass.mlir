// attnkit-vectorize-flash alone, on the flash form attnkit-flash-attention
// made (piped in), and on loops it must leave alone.
//
// Prefill (query tile 16): the marked loops become vector code on memrefs --
// Q^T packed into a stack tile, FMAs on vector<16xf32>, no linalg or marker
// left.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 2 --kv-heads 1 --q-len 40 --kv-len 100 --mask causal \
// RUN:   | attnkit-opt --attnkit-flash-attention | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=PREFILL
// PREFILL-LABEL: func.func @attention
// PREFILL:       memref.alloca() {{.*}} : memref<32x
// PREFILL:       scf.for
// PREFILL:         scf.for
// PREFILL:           vector.fma {{.*}} : vector<16xf32>
// PREFILL-NOT:   linalg.generic
// PREFILL-NOT:   attnkit.flash
//
// A headed decode kernel (--headed: a band of kv heads, memrefs with a
// leading head dim, the attention of one head inside a head_loop): the
// vectorizer walks the heads inside each KV tile -- per-head state allocated
// for all heads before the loop, 16-key blocks of the tile with a loop over
// the heads inside, each head's K rows sliced from the band, read once in
// address order (an element per line into an empty asm with side effects)
// before the block's QK^T when asked to read ahead (read-ahead=true,
// KernelSpec::readAhead: K/V larger than the last-level cache), nothing
// prefetched -- and leaves the head loop one trip (the canonicalizer folds
// it). Not asked, the same kernel prefetches each head's rows ahead and
// reads nothing ahead (HEADEDPF).
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 2 --q-len 1 --kv-len 300 --headed \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash="read-ahead=true" > %t.headed
// RUN: FileCheck %s --check-prefix=HEADED < %t.headed
// RUN: FileCheck %s --check-prefix=HEADEDNOPF < %t.headed
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 2 --q-len 1 --kv-len 300 --headed \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash > %t.headedpf
// RUN: FileCheck %s --check-prefix=HEADEDPF < %t.headedpf
// RUN: FileCheck %s --check-prefix=HEADEDNORA < %t.headedpf
// HEADED-LABEL: func.func @attention
// HEADED:       %[[H:.*]] = memref.dim %arg6, %c0
// HEADED:       memref.alloca(%[[H]]) {{.*}} : memref<?x2x32xf32>
// HEADED:       scf.for %{{.*}} = %c0 to %[[ONE:c1_[0-9]+]] step %c1 {
// HEADED:       scf.for %[[J0:.*]] = %{{.*}} to %{{.*}} step %c64
// HEADED:         scf.for %[[JB:.*]] = %{{.*}} to %{{.*}} step %c16
// HEADED:           scf.for %{{.*}} = %[[JB]] to %{{.*}} step %c1
// HEADED:             scf.for %[[HR:.*]] = %{{.*}} to %[[H]] step
// HEADED:               memref.subview %arg1[%[[HR]], 0, 0]
// HEADED:               memref.load
// HEADED:               llvm.inline_asm has_side_effects "", "r" %{{.*}} : (i32) -> ()
// HEADED:           scf.for %[[HH:.*]] = %{{.*}} to %[[H]] step
// HEADED:             memref.subview %arg1[%[[HH]], 0, 0]
// HEADED:             scf.for %{{.*}} = %[[JB]] to %{{.*}} step %c8
// HEADED:       } {attnkit.flash_role = #attnkit.flash_role<head_loop>}
// HEADED-NOT:   linalg.generic
// HEADEDNOPF-NOT: memref.prefetch
// HEADEDNORA-NOT: llvm.inline_asm
// HEADEDPF-LABEL: func.func @attention
// HEADEDPF:       scf.for %[[JB:.*]] = %{{.*}} to %{{.*}} step %c16
// HEADEDPF:         scf.for %[[HH:.*]] = %{{.*}} to %{{.*}} step
// HEADEDPF:           memref.subview %arg1[%[[HH]], 0, 0]
// HEADEDPF:           scf.for %{{.*}} = %[[JB]] to %{{.*}} step %c8
// HEADEDPF:             memref.prefetch
//
// A headed prefill kernel keeps its heads outside: the head loop runs over
// the band, the per-head kernel inside it.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 2 --q-len 40 --kv-len 300 --headed \
// RUN:   | attnkit-opt --attnkit-flash-attention | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=HEADEDP
// HEADEDP-LABEL: func.func @attention
// HEADEDP-NOT:   memref.alloca(%
// HEADEDP:       %[[H:.*]] = memref.dim %arg6, %c0
// HEADEDP:       scf.for %{{.*}} = %c0 to %[[H]] step %c1 {
// HEADEDP:         vector.fma
// HEADEDP:       } {attnkit.flash_role = #attnkit.flash_role<head_loop>}
//
// Causal MHA prefill (query tile 64, 4 vectors of consecutive queries): the
// key range of each vector of rows is its own (the flash form's last_row
// bound evaluated per vector), so on the diagonal tile QK^T runs keys seen
// by all four vectors in blocks of 4 keys, then those seen by the last three
// (5 keys), two (8) and one (16); no role is left on the copies.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 1 --kv-heads 1 --q-len 200 --mask causal \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=64" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=DIAG
// DIAG-LABEL: func.func @attention
// DIAG-NOT:   last_row
// DIAG:       scf.for %{{.*}} = %{{.*}} to %[[E0:[0-9]+]] step %c4
// DIAG:       scf.for %{{.*}} = %[[E0]] to %[[E1:[0-9]+]] step %c5
// DIAG:       scf.for %{{.*}} = %[[E1]] to %[[E2:[0-9]+]] step %c8
// DIAG:       scf.for %{{.*}} = %[[E2]] to %{{[0-9]+}} step %c16
// DIAG-NOT:   last_row
// Without a mask every vector sees the tile: one run of 4-key blocks.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 1 --kv-heads 1 --q-len 200 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=64" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=NODIAG
// NODIAG-LABEL: func.func @attention
// NODIAG:       scf.for %{{.*}} step %c4
// NODIAG-NOT:   step %c5
//
// Decode (query tile 1): K rows streamed, one reduction per key.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 1 --q-len 1 --kv-len 100 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=DECODE
// DECODE-LABEL: func.func @attention
// DECODE:       vector.load {{.*}} : memref<?x32xf32{{.*}}>, vector<16xf32>
// DECODE:       vector.reduction <add>
// DECODE-NOT:   linalg.generic
// DECODE-NOT:   attnkit.flash
//
// A decode kernel of one head asked to read ahead (read-ahead=true,
// KernelSpec::readAhead: f32 K/V larger than the last-level cache): each KV
// tile's K rows, then its V rows, read once (an element per 64-byte line
// into an empty asm with side effects) before the tile's QK^T, and nothing
// prefetched. Without the option the same kernel prefetches and reads
// nothing ahead.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 1 --q-len 1 --kv-len 100 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash="read-ahead=true" \
// RUN:   | FileCheck %s --check-prefix=READAHEAD
// READAHEAD-LABEL: func.func @attention
// READAHEAD-NOT:   memref.prefetch
// READAHEAD:       scf.for %[[J0:.*]] = %{{.*}} to %{{.*}} step %c64
// READAHEAD:         scf.for %{{.*}} = %{{.*}} to %[[BK:.*]] step %c1
// READAHEAD:           memref.load %arg1[%{{.*}}, %c0
// READAHEAD:           llvm.inline_asm has_side_effects "", "r" %{{.*}} : (i32) -> ()
// READAHEAD:           memref.load %arg1[%{{.*}}, %c16
// READAHEAD:         scf.for %{{.*}} = %{{.*}} to %[[BK]] step %c1
// READAHEAD:           memref.load %arg2[%{{.*}}, %c0
// READAHEAD:           llvm.inline_asm has_side_effects "", "r" %{{.*}} : (i32) -> ()
// READAHEAD:           memref.load %arg2[%{{.*}}, %c16
// READAHEAD:         scf.for %{{.*}} = %{{.*}} to %[[BK]] step %c4
// READAHEAD:           vector.load %arg1
// READAHEAD:           vector.fma
// READAHEAD-NOT:   memref.prefetch
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 4 --kv-heads 1 --q-len 1 --kv-len 100 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash \
// RUN:   | FileCheck %s --check-prefix=PREFETCH
// PREFETCH-LABEL: func.func @attention
// PREFETCH-NOT:   llvm.inline_asm
// PREFETCH:       memref.prefetch %arg1
// PREFETCH-NOT:   llvm.inline_asm
// PREFETCH:       memref.prefetch %arg2
// PREFETCH-NOT:   llvm.inline_asm
//
// Decode with transposed V: P.V's loop over the tile's keys stays a loop
// (llvm.loop.unroll.disable on its back edge in the LLVM IR): unrolled, LLVM
// hoisted the Vᵀ loads of every copy and spilled accumulators.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 1 --kv-heads 1 --q-len 1 --kv-len 100 --layout tv \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=TV
// TV:     #[[UNROLL:.*]] = #llvm.loop_unroll<disable = true>
// TV:     #[[ROLLED:.*]] = #llvm.loop_annotation<unroll = #[[UNROLL]]>
// TV:     vector.fma
// TV:     } {loop_annotation = #[[ROLLED]]}
// The next tile's Vᵀ lines: f32 prefetches them all before the key loop
// (none inside it); bf16 (twice the keys per tile) spreads them over the
// loop's key steps.
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 1 --kv-heads 1 --q-len 1 --kv-len 100 --layout tv \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=TVF32
// TVF32:       memref.prefetch %arg2
// TVF32:       scf.for {{.*}} step %c16{{.*}} iter_args(
// TVF32-NOT:   memref.prefetch %arg2
// TVF32:       } {loop_annotation =
// RUN: attnkit-compile --emit=attention --head-dim 32 --heads 1 --kv-heads 1 --q-len 1 --kv-len 100 --layout tv --dtype bf16 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | attnkit-opt --attnkit-vectorize-flash | FileCheck %s --check-prefix=TVBF16
// TVBF16-NOT:  memref.prefetch %arg2
// TVBF16:      scf.for {{.*}} step %c16{{.*}} iter_args(
// TVBF16:        memref.prefetch %arg2
// TVBF16:      } {loop_annotation =
// RUN: attnkit-compile --emit=llvm-ir --head-dim 32 --heads 1 --kv-heads 1 --q-len 1 --layout tv | FileCheck %s --check-prefix=TVLL
// TVLL:   br label %{{.*}}, !llvm.loop ![[LOOP:[0-9]+]]
// TVLL:   ![[LOOP]] = distinct !{![[LOOP]], ![[DISABLE:[0-9]+]]}
// TVLL:   ![[DISABLE]] = !{!"llvm.loop.unroll.disable"}
//
// No match: a loop without a flash role is not looked at; a query_loop that
// is not the flash form is left for the linalg path, with a remark (a
// performance cliff, not an error), and loses its role.
// RUN: attnkit-opt %s --split-input-file --verify-diagnostics --attnkit-vectorize-flash | FileCheck %s

// CHECK-LABEL: func.func @unmarked
// CHECK:         scf.for
// CHECK-NOT:     vector.
func.func @unmarked(%n: index, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x) -> f32 {
    %b = arith.addf %a, %a : f32
    scf.yield %b : f32
  }
  return %r : f32
}

// -----

// CHECK-LABEL: func.func @marked_but_not_flash
// CHECK:         scf.for
// CHECK-NOT:     attnkit.flash_role
// CHECK:         return
func.func @marked_but_not_flash(%n: index, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  // expected-remark @+1 {{not vectorized: not the flash form this pass emits vector code for; left for the linalg path}}
  %r = scf.for %i = %c0 to %n step %c16 iter_args(%a = %x) -> f32 {
    %b = arith.addf %a, %a : f32
    scf.yield %b : f32
  } {attnkit.flash_role = #attnkit.flash_role<query_loop>}
  return %r : f32
}
