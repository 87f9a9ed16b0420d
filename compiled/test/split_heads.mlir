// attnkit-split-heads: the attention block tiled over its KV heads by
// upstream's tile-and-fuse, the Q projection (matmul, expand_shape,
// transpose) fused into the head loop on its head's columns of Wq; then
// every contraction generalized, tiled by 16 along its run-time-sized rows
// (tokens), and each tile ordered reduction x rows x columns, the output's
// unit-stride dimension innermost.
// RUN: attnkit-opt %s --split-input-file --attnkit-split-heads --verify-diagnostics | FileCheck %s

// 2 KV heads x 2 query heads x D 16 (hq·d = 64), hidden 48; out = the heads
// back as rows. No [s, hq·d] tensor (all heads' queries) and no matmul is
// left outside the loop.
// CHECK-LABEL: func.func @block
// CHECK-NOT: linalg.matmul
// CHECK-NOT: tensor<?x64xf32>
// CHECK: scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[COL:.*]] = affine.linearize_index disjoint [%[[H]], %{{.*}}, %{{.*}}] by (2, 2, 16)
// CHECK: %[[WQ:.*]] = tensor.extract_slice %arg1[0, %[[COL]]] [48, 32] [1, 1] : tensor<48x64xf32> to tensor<48x32xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// CHECK: %[[WQT:.*]] = tensor.extract_slice %[[WQ]][0, 0] [48, 32] [1, 1]
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["reduction", "parallel", "parallel"]} ins(%{{.*}}, %[[WQT]] : tensor<?x48xf32>, tensor<48x32xf32>)
// CHECK: arith.mulf {{.*}} fastmath<contract>
// CHECK: } -> tensor<?x32xf32>
// CHECK: tensor.expand_shape {{.*}} into tensor<?x1x2x16xf32>
// CHECK: linalg.transpose
// CHECK: tensor.extract_slice %arg2[%[[H]], 0, 0] [1, %{{.*}}, 16]
// CHECK: attnkit.attention q(%{{.*}} : tensor<2x?x16xf32>) k(%{{.*}} : tensor<?x16xf32>) v(%{{.*}} : tensor<?x16xf32>)
// CHECK: linalg.transpose
// CHECK: scf.yield
// CHECK: } {attnkit.flash_role = #attnkit.flash_role<head_loop>}
// CHECK-NOT: linalg.matmul
// CHECK-NOT: tensor<?x64xf32>
// CHECK-NOT: attnkit.attention
// CHECK: return
func.func @block(%x: tensor<?x48xf32>, %wq: tensor<48x64xf32>,
                 %k: tensor<2x?x16xf32>, %v: tensor<2x?x16xf32>,
                 %s: f32) -> tensor<?x2x2x16xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x48xf32>
  %e = tensor.empty(%n) : tensor<?x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %q = linalg.matmul ins(%x, %wq : tensor<?x48xf32>, tensor<48x64xf32>)
      outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %q4 = tensor.expand_shape %q [[0], [1, 2, 3]] output_shape [%n, 2, 2, 16]
      : tensor<?x64xf32> into tensor<?x2x2x16xf32>
  %te = tensor.empty(%n) : tensor<2x2x?x16xf32>
  %qt = linalg.transpose ins(%q4 : tensor<?x2x2x16xf32>)
      outs(%te : tensor<2x2x?x16xf32>) permutation = [1, 2, 0, 3]
  %o, %l = attnkit.attention q(%qt : tensor<2x2x?x16xf32>)
      k(%k : tensor<2x?x16xf32>) v(%v : tensor<2x?x16xf32>) scale(%s)
      -> tensor<2x2x?x16xf32>, tensor<2x2x?xf32> {
  ^bb0(%i: index, %j: index, %xx: f32):
    attnkit.yield %xx : f32
  }
  %re = tensor.empty(%n) : tensor<?x2x2x16xf32>
  %r = linalg.transpose ins(%o : tensor<2x2x?x16xf32>)
      outs(%re : tensor<?x2x2x16xf32>) permutation = [2, 0, 1, 3]
  return %r : tensor<?x2x2x16xf32>
}

// -----

// With the output projection the heads are a reduction of its contraction:
// the loop carries y, whose zero fill stays outside (fusing it would reset
// the sum every head), and each head adds O_h . Wo_h.
// CHECK-LABEL: func.func @block_wo
// CHECK: %[[Y0:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?x64xf32>)
// CHECK: scf.for %[[H:.*]] = {{.*}} iter_args(%[[Y:.*]] = %[[Y0]]) -> (tensor<?x64xf32>)
// CHECK: linalg.generic
// CHECK: } -> tensor<?x32xf32>
// CHECK: attnkit.attention q(%{{.*}} : tensor<2x?x16xf32>)
// CHECK: tensor.extract_slice %arg4[%{{.*}}, %{{.*}}] [32, 64]
// CHECK: %[[YS:.*]] = tensor.extract_slice %[[Y]]
// CHECK: scf.for {{.*}} step %{{.*}} iter_args(%{{.*}} = %[[YS]])
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "reduction", "reduction", "parallel", "parallel"]}
// CHECK: scf.yield
// CHECK: } {attnkit.flash_role = #attnkit.flash_role<head_loop>}
#o = affine_map<(t, c, h, g, e) -> (h, g, t, e)>
#w = affine_map<(t, c, h, g, e) -> (h, g, e, c)>
#y = affine_map<(t, c, h, g, e) -> (t, c)>
func.func @block_wo(%x: tensor<?x64xf32>, %wq: tensor<64x64xf32>,
                    %k: tensor<2x?x16xf32>, %v: tensor<2x?x16xf32>,
                    %wo: tensor<64x64xf32>, %s: f32) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%n) : tensor<?x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %q = linalg.matmul ins(%x, %wq : tensor<?x64xf32>, tensor<64x64xf32>)
      outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %q4 = tensor.expand_shape %q [[0], [1, 2, 3]] output_shape [%n, 2, 2, 16]
      : tensor<?x64xf32> into tensor<?x2x2x16xf32>
  %te = tensor.empty(%n) : tensor<2x2x?x16xf32>
  %qt = linalg.transpose ins(%q4 : tensor<?x2x2x16xf32>)
      outs(%te : tensor<2x2x?x16xf32>) permutation = [1, 2, 0, 3]
  %o, %l = attnkit.attention q(%qt : tensor<2x2x?x16xf32>)
      k(%k : tensor<2x?x16xf32>) v(%v : tensor<2x?x16xf32>) scale(%s)
      -> tensor<2x2x?x16xf32>, tensor<2x2x?xf32> {
  ^bb0(%i: index, %j: index, %xx: f32):
    attnkit.yield %xx : f32
  }
  %wo4 = tensor.expand_shape %wo [[0, 1, 2], [3]] output_shape [2, 2, 16, 64]
      : tensor<64x64xf32> into tensor<2x2x16x64xf32>
  %ye = tensor.empty(%n) : tensor<?x64xf32>
  %y0 = linalg.fill ins(%zero : f32) outs(%ye : tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = linalg.generic {indexing_maps = [#o, #w, #y],
      iterator_types = ["parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%o, %wo4 : tensor<2x2x?x16xf32>, tensor<2x2x16x64xf32>)
      outs(%y0 : tensor<?x64xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// An attention without a KV-head dimension has no heads to split.
// CHECK-LABEL: func.func @single_group
// CHECK-NOT: scf.for
// CHECK: attnkit.attention q(%arg0 : tensor<2x?x16xf32>)
func.func @single_group(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                        %v: tensor<?x16xf32>, %s: f32) -> tensor<2x?x16xf32> {
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return %o : tensor<2x?x16xf32>
}

// -----

// The heads need a consumer to tile: an output returned as it is has none.
func.func @no_consumer(%q: tensor<2x2x?x16xf32>, %k: tensor<2x?x16xf32>,
                       %v: tensor<2x?x16xf32>, %s: f32) -> tensor<2x2x?x16xf32> {
  // expected-error @+1 {{expects a linalg consumer whose indexing map walks the output's heads with one loop}}
  %o, %l = attnkit.attention q(%q : tensor<2x2x?x16xf32>)
      k(%k : tensor<2x?x16xf32>) v(%v : tensor<2x?x16xf32>) scale(%s)
      -> tensor<2x2x?x16xf32>, tensor<2x2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return %o : tensor<2x2x?x16xf32>
}
