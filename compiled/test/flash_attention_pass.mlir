// attnkit-flash-attention: what it leaves alone, what it refuses, and the
// decode form. (The full prefill rewrites: flash_attention_causal.mlir and
// flash_attention_bias_tv.mlir.)
// RUN: attnkit-opt %s --split-input-file --attnkit-flash-attention | FileCheck %s
// RUN: attnkit-opt %s --split-input-file --verify-diagnostics --attnkit-flash-attention="query-tile=0" -o /dev/null
// RUN: not attnkit-opt %s --attnkit-flash-attention="kv-tile=-4" 2>&1 | FileCheck %s --check-prefix=KV
// KV: error: tile sizes must be positive (query-tile=16, kv-tile=-4)
// A decode problem (one query row): one KV loop of 64-key tiles, its query
// loop a single step of one row.
// RUN: attnkit-compile --emit=attention --head-dim 16 --heads 4 --kv-heads 2 --q-len 1 --kv-len 300 \
// RUN:   | attnkit-opt --attnkit-flash-attention="query-tile=1" | FileCheck %s --check-prefix=DECODE
// DECODE-LABEL: func.func @attention
// DECODE:       scf.for %{{.*}} step %c1{{[_0-9]*}} iter_args(
// DECODE:         scf.for %{{.*}} step %c64{{[_0-9]*}} iter_args({{.*}}) -> (tensor<2x?xf32>, tensor<2x?xf32>, tensor<2x?x16xf32>)
// DECODE:         } {attnkit.flash_role = #attnkit.flash_role<kv_loop>}
// DECODE:       } {attnkit.flash_role = #attnkit.flash_role<query_loop>}
// DECODE-NOT:   tensor<2x?x?xf32>

// The pass matches attnkit.attention, not bodies: linalg that computes a part
// of attention (Q.K^T alone) is left as it is.
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

// -----

// A modifier that is not additive in the score (x * 0.5, a soft cap): log2(e)
// cannot fold into the scale, so the modified score itself is multiplied by
// it, and the scale is used as given.
// CHECK-LABEL: func.func @not_additive
// CHECK-NOT:     arith.mulf %arg3, %{{.*}} : f32
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             linalg.generic {{.*}}attnkit.flash_role = #attnkit.flash_role<modifier>
// CHECK:               %[[X:.*]] = arith.mulf %{{.*}}, %arg3 : f32
// CHECK:               %[[C:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK:               %[[L:.*]] = arith.mulf %[[C]], %{{.*}} : f32
// CHECK-NEXT:          linalg.yield %[[L]] : f32
// expected-error @+1 {{tile sizes must be positive (query-tile=0, kv-tile=64)}}
func.func @not_additive(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                        %v: tensor<?x16xf32>, %scale: f32)
    -> (tensor<2x?x16xf32>, tensor<2x?xf32>) {
  %o, %lse = attnkit.attention q(%q : tensor<2x?x16xf32>)
      k(%k : tensor<?x16xf32>) v(%v : tensor<?x16xf32>) scale(%scale)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    %half = arith.constant 0.5 : f32
    %c = arith.mulf %x, %half : f32
    attnkit.yield %c : f32
  }
  return %o, %lse : tensor<2x?x16xf32>, tensor<2x?xf32>
}
