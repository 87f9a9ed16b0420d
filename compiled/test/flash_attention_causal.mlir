// The naive causal GQA attention (G = 2 query heads per KV head, D = 64) as
// ir_builder.cc emits it goes in; the FlashAttention form must come out.
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
// masked KV tiles are never visited.
// CHECK:       %[[LAST:.*]] = arith.subi %{{[0-9]+}}, %c1{{[_0-9]*}} : index
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

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map5 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @attention(%arg0: memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>, %arg1: memref<?x64xf32, strided<[?, 1], offset: ?>>, %arg2: memref<?x64xf32, strided<[?, 1], offset: ?>>, %arg3: memref<2x?x?xf32, strided<[?, ?, 1], offset: ?>>, %arg4: memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>, %arg5: memref<2x?xf32, strided<[?, 1], offset: ?>>, %arg6: f32, %arg7: index, %arg8: index) attributes {attnkit.spec = "d64_f32_causal_v_g2"} {
    %0 = bufferization.to_tensor %arg0 restrict : memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>> to tensor<2x?x64xf32>
    %1 = bufferization.to_tensor %arg1 restrict : memref<?x64xf32, strided<[?, 1], offset: ?>> to tensor<?x64xf32>
    %2 = bufferization.to_tensor %arg2 restrict : memref<?x64xf32, strided<[?, 1], offset: ?>> to tensor<?x64xf32>
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %0, %c1 : tensor<2x?x64xf32>
    %c0 = arith.constant 0 : index
    %dim_0 = tensor.dim %1, %c0 : tensor<?x64xf32>
    %3 = tensor.empty(%dim, %dim_0) : tensor<2x?x?xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<2x?x?xf32>) -> tensor<2x?x?xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%0, %1 : tensor<2x?x64xf32>, tensor<?x64xf32>) outs(%4 : tensor<2x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %23 = arith.mulf %in, %in_4 fastmath<reassoc,contract> : f32
      %24 = arith.addf %out, %23 fastmath<reassoc,contract> : f32
      linalg.yield %24 : f32
    } -> tensor<2x?x?xf32>
    %6 = tensor.empty(%dim, %dim_0) : tensor<2x?x?xf32>
    %7 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<2x?x?xf32>) outs(%6 : tensor<2x?x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = arith.mulf %in, %arg6 : f32
      %24 = linalg.index 1 : index
      %25 = linalg.index 2 : index
      %26 = arith.addi %24, %arg7 : index
      %27 = arith.cmpi sle, %25, %26 : index
      %cst_4 = arith.constant 0xFF800000 : f32
      %28 = arith.select %27, %23, %cst_4 : f32
      linalg.yield %28 : f32
    } -> tensor<2x?x?xf32>
    %8 = tensor.empty(%dim) : tensor<2x?xf32>
    %cst_1 = arith.constant 0xFF800000 : f32
    %9 = linalg.fill ins(%cst_1 : f32) outs(%8 : tensor<2x?xf32>) -> tensor<2x?xf32>
    %10 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel", "reduction"]} ins(%7 : tensor<2x?x?xf32>) outs(%9 : tensor<2x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = arith.maximumf %in, %out : f32
      linalg.yield %23 : f32
    } -> tensor<2x?xf32>
    %11 = tensor.empty(%dim, %dim_0) : tensor<2x?x?xf32>
    %12 = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %10 : tensor<2x?x?xf32>, tensor<2x?xf32>) outs(%11 : tensor<2x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0xFF800000 : f32
      %cst_6 = arith.constant 0.000000e+00 : f32
      %23 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %24 = arith.select %23, %cst_6, %in_4 : f32
      %25 = arith.subf %in, %24 : f32
      %26 = math.exp %25 : f32
      linalg.yield %26 : f32
    } -> tensor<2x?x?xf32>
    %13 = tensor.empty(%dim) : tensor<2x?xf32>
    %cst_2 = arith.constant 0.000000e+00 : f32
    %14 = linalg.fill ins(%cst_2 : f32) outs(%13 : tensor<2x?xf32>) -> tensor<2x?xf32>
    %15 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel", "reduction"]} ins(%12 : tensor<2x?x?xf32>) outs(%14 : tensor<2x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %23 = arith.addf %out, %in : f32
      linalg.yield %23 : f32
    } -> tensor<2x?xf32>
    %16 = tensor.empty(%dim, %dim_0) : tensor<2x?x?xf32>
    %17 = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%12, %15 : tensor<2x?x?xf32>, tensor<2x?xf32>) outs(%16 : tensor<2x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0.000000e+00 : f32
      %23 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %24 = arith.divf %in, %in_4 : f32
      %25 = arith.select %23, %cst_5, %24 : f32
      linalg.yield %25 : f32
    } -> tensor<2x?x?xf32>
    %18 = tensor.empty(%dim) : tensor<2x?x64xf32>
    %cst_3 = arith.constant 0.000000e+00 : f32
    %19 = linalg.fill ins(%cst_3 : f32) outs(%18 : tensor<2x?x64xf32>) -> tensor<2x?x64xf32>
    %20 = linalg.generic {indexing_maps = [#map2, #map1, #map], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%17, %2 : tensor<2x?x?xf32>, tensor<?x64xf32>) outs(%19 : tensor<2x?x64xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %23 = arith.mulf %in, %in_4 fastmath<reassoc,contract> : f32
      %24 = arith.addf %out, %23 fastmath<reassoc,contract> : f32
      linalg.yield %24 : f32
    } -> tensor<2x?x64xf32>
    %21 = tensor.empty(%dim) : tensor<2x?xf32>
    %22 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel", "parallel"]} ins(%10, %15 : tensor<2x?xf32>, tensor<2x?xf32>) outs(%21 : tensor<2x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0.000000e+00 : f32
      %cst_6 = arith.constant 0xFF800000 : f32
      %23 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %24 = math.log %in_4 : f32
      %cst_7 = arith.constant 0xFF800000 : f32
      %cst_8 = arith.constant 0.000000e+00 : f32
      %25 = arith.cmpf oeq, %in, %cst_7 : f32
      %26 = arith.select %25, %cst_8, %in : f32
      %27 = arith.addf %26, %24 : f32
      %28 = arith.select %23, %cst_6, %27 : f32
      linalg.yield %28 : f32
    } -> tensor<2x?xf32>
    bufferization.materialize_in_destination %20 in restrict writable %arg4 : (tensor<2x?x64xf32>, memref<2x?x64xf32, strided<[?, ?, 1], offset: ?>>) -> ()
    bufferization.materialize_in_destination %22 in restrict writable %arg5 : (tensor<2x?xf32>, memref<2x?xf32, strided<[?, 1], offset: ?>>) -> ()
    return
  }
}
