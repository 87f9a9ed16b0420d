// The causal GQA attention (G = 2 query heads per KV head, D = 64), one
// attnkit.attention as ir_builder.cc emits it, goes in; the FlashAttention
// form must come out.
// RUN: attnkit-opt %s --attnkit-flash-attention | FileCheck %s
// RUN: attnkit-opt %s --attnkit-flash-attention="query-tile=32 kv-tile=128" | FileCheck %s --check-prefix=TILES

// CHECK-LABEL: func.func @attention
// log2(e) is folded into the scale once, outside every loop.
// CHECK:       %[[L2E:.*]] = arith.constant 1.44269502 : f32
// CHECK:       %[[SCALE2:.*]] = arith.mulf %arg6, %[[L2E]] : f32
// No S×S tensor survives: the only rank-3 f32 scores are 16x64 tiles.
// CHECK-NOT:   tensor.empty({{.*}}) : tensor<2x?x?xf32>
// Query tiles...
// CHECK:       scf.for %[[I0:.*]] = %{{.*}} to %{{.*}} step %c16{{[_0-9]*}} iter_args(
// ...whose causal key range ends at min(N, p0 + last row + 1): the fully
// masked KV tiles are never visited. The last row is marked for the
// vectorizer (which evaluates the bound per vector of rows).
// CHECK:       %[[LAST:.*]] = arith.subi %{{[0-9]+}}, %c1{{[_0-9]*}} {attnkit.flash_role = #attnkit.flash_role<last_row>} : index
// CHECK:       %[[LIM:.*]] = arith.addi %[[LAST]], %arg7 : index
// CHECK:       %[[END:.*]] = arith.addi %[[LIM]], %{{.*}} : index
// CHECK:       %[[HI0:.*]] = arith.minsi %{{.*}}, %[[END]] : index
// CHECK:       %[[HI:.*]] = arith.maxsi %[[HI0]], %{{.*}} : index
// The KV loop carries running max, running sum and the accumulator.
// CHECK:       scf.for %[[J0:.*]] = %{{.*}} to %[[HI]] step %c64{{[_0-9]*}} iter_args(%[[M:[a-z0-9_]+]] = %{{[0-9]+}}, %[[L:[a-z0-9_]+]] = %{{[0-9]+}}, %[[ACC:[a-z0-9_]+]] = %{{[0-9]+}}) -> (tensor<2x?xf32>, tensor<2x?xf32>, tensor<2x?x64xf32>)
// Exactly one QKᵀ per tile (the first 4-loop contraction)...
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}}outs(%{{.*}} : tensor<2x?x?xf32>)
// CHECK:           arith.mulf %{{.*}}, %[[SCALE2]] : f32
// CHECK:           affine.apply
// CHECK:           arith.cmpi sle
// CHECK:           arith.select
// CHECK:         linalg.generic {{.*}}outs(%[[M]], {{.*}}) {
// CHECK:           arith.maximumf
// CHECK:           math.exp2
// CHECK:           linalg.yield
// CHECK:         math.exp2
// CHECK:         linalg.generic {{.*}}outs(%[[L]] : tensor<2x?xf32>)
// CHECK:         linalg.generic {{.*}}outs(%[[ACC]] : tensor<2x?x64xf32>)
// ...and one P·V (loop order (g,i,j,d): V's unit-stride dim innermost),
// accumulated onto the rescaled accumulator.
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]{{.*}}outs(%{{.*}} : tensor<2x?x64xf32>)
// CHECK-NOT:     iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK:         scf.yield
// 1/l once per row after the KV loop.
// CHECK:       arith.divf
// CHECK:       math.log2
// CHECK:       tensor.insert_slice
// CHECK-NOT:   math.exp {{.*}}
// CHECK:       bufferization.materialize_in_destination

// TILES:       scf.for {{.*}} step %c32{{[_0-9]*}} iter_args(
// TILES:       scf.for {{.*}} step %c128{{[_0-9]*}} iter_args(
// TILES:       bufferization.alloc_tensor() : tensor<2x32x128xf32>

module {
  func.func @attention(%arg0: memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>, %arg1: memref<?x64xf32, strided<[?, 1], offset: ?>>, %arg2: memref<?x64xf32, strided<[?, 1], offset: ?>>, %arg3: memref<2x?x?xf32, strided<[?, ?, 1], offset: ?>>, %arg4: memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>, %arg5: memref<2x?xf32, strided<[?, 1], offset: ?>>, %arg6: f32, %arg7: index, %arg8: index) attributes {attnkit.spec = "d64_f32_causal_v_g2"} {
    %0 = bufferization.to_tensor %arg0 restrict : memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>> to tensor<2x?x64xf32>
    %1 = bufferization.to_tensor %arg1 restrict : memref<?x64xf32, strided<[?, 1], offset: ?>> to tensor<?x64xf32>
    %2 = bufferization.to_tensor %arg2 restrict : memref<?x64xf32, strided<[?, 1], offset: ?>> to tensor<?x64xf32>
    %output, %lse = attnkit.attention q(%0 : tensor<2x?x64xf32>) k(%1 : tensor<?x64xf32>) v(%2 : tensor<?x64xf32>) scale(%arg6) -> tensor<2x?x64xf32>, tensor<2x?xf32> {
    ^bb0(%arg9: index, %arg10: index, %arg11: f32):
      %3 = arith.addi %arg9, %arg7 : index
      %4 = arith.cmpi sle, %arg10, %3 : index
      %cst = arith.constant 0xFF800000 : f32
      %5 = arith.select %4, %arg11, %cst : f32
      attnkit.yield %5 : f32
    }
    bufferization.materialize_in_destination %output in restrict writable %arg4 : (tensor<2x?x64xf32>, memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>) -> ()
    bufferization.materialize_in_destination %lse in restrict writable %arg5 : (tensor<2x?xf32>, memref<2x?xf32, strided<[?, 1], offset: ?>>) -> ()
    return
  }
}

