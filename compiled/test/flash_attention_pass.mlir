// attnkit-flash-attention: what it leaves alone, what it refuses, and the
// decode form. (The full prefill rewrites: flash_attention_causal.mlir and
// flash_attention_bias_tv.mlir.)
// RUN: attnkit-opt %s --split-input-file --attnkit-flash-attention | FileCheck %s
// RUN: attnkit-opt %s --split-input-file --verify-diagnostics --attnkit-flash-attention="query-tile=0" -o /dev/null
// RUN: not attnkit-opt %s --attnkit-flash-attention="kv-tile=-4" 2>&1 | FileCheck %s --check-prefix=KV
// KV: error: tile sizes must be positive (query-tile=16, kv-tile=-4)
// A decode problem (one query row): one KV loop of 64-key tiles, its query
// loop a single step of one row.
// RUN: attnkit-compile --emit=naive --head-dim 16 --heads 4 --kv-heads 2 --q-len 1 --kv-len 300 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | FileCheck %s --check-prefix=DECODE
// DECODE-LABEL: func.func @attention
// DECODE:       scf.for %{{.*}} step %c1{{[_0-9]*}} iter_args(
// DECODE:         scf.for %{{.*}} step %c64{{[_0-9]*}} iter_args({{.*}}) -> (tensor<2x?xf32>, tensor<2x?xf32>, tensor<2x?x16xf32>)
// DECODE:         } {attnkit.flash.kv_loop}
// DECODE:       } {attnkit.flash.query_loop}
// DECODE-NOT:   tensor<2x?x?xf32>

// Only a part of the chain (Q.K^T alone, no softmax or P.V): not attention,
// left as it is.
// CHECK-LABEL: func.func @qk_only
// CHECK:         linalg.generic
// CHECK-NOT:     scf.for
// CHECK:         return
// expected-error @+1 {{tile sizes must be positive (query-tile=0, kv-tile=64)}}
func.func @qk_only(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                   %s: tensor<2x?x?xf32>) -> tensor<2x?x?xf32> {
  %r = linalg.generic {
      indexing_maps = [affine_map<(h, i, j, d) -> (h, i, d)>,
                       affine_map<(h, i, j, d) -> (j, d)>,
                       affine_map<(h, i, j, d) -> (h, i, j)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<2x?x16xf32>, tensor<?x16xf32>)
      outs(%s : tensor<2x?x?xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %n = arith.addf %acc, %m : f32
    linalg.yield %n : f32
  } -> tensor<2x?x?xf32>
  return %r : tensor<2x?x?xf32>
}

// -----

// Nothing to rewrite in a function without linalg, nor in a declaration.
// CHECK-LABEL: func.func private @external
// CHECK-LABEL: func.func @scalar
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    return
func.func private @external(tensor<?x16xf32>) -> tensor<?x16xf32>
// expected-error @+1 {{tile sizes must be positive (query-tile=0, kv-tile=64)}}
func.func @scalar(%x: f32) -> f32 {
  %y = arith.addf %x, %x : f32
  return %y : f32
}
