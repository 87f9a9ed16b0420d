// Additive bias, bf16 storage, transposed V: the bias is sliced per tile and
// scaled by log2(e) with the scores; V is read as [D, N] tiles.
// RUN: attnkit-opt %s --attnkit-flash-attention | FileCheck %s

// CHECK-LABEL: func.func @attention
// CHECK:       %[[SCALE2:.*]] = arith.mulf %arg6, %{{.*}} : f32
// No key range narrowing without a mask: the KV loop starts at 0.
// CHECK:       scf.for %[[J0:.*]] = %c0{{.*}} to %{{.*}} step %c64{{[_0-9]*}} iter_args(
// CHECK:         %[[KT:.*]] = tensor.extract_slice %{{.*}}[%[[J0]], 0] [%{{.*}}, 32] [1, 1] : tensor<?x32xbf16> to tensor<?x32xbf16>
// CHECK:         %[[VT:.*]] = tensor.extract_slice %{{.*}}[0, %[[J0]]] [32, %{{.*}}] [1, 1] : tensor<32x?xbf16> to tensor<32x?xbf16>
// CHECK:         %[[BT:.*]] = tensor.extract_slice %{{.*}}[0, %{{.*}}, %[[J0]]] [1, %{{.*}}, %{{.*}}] [1, 1, 1] : tensor<1x?x?xf32> to tensor<1x?x?xf32>
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %[[BT]] : tensor<1x?x?xf32>, tensor<1x?x?xf32>)
// CHECK:           %[[B2:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:           %[[S2:.*]] = arith.mulf %{{.*}}, %[[SCALE2]] : f32
// CHECK:           arith.addf %[[S2]], %[[B2]] : f32
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %[[VT]] : tensor<1x?x?xf32>, tensor<32x?xbf16>)
// CHECK:           arith.extf

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map5 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @attention(%arg0: memref<1x?x32xbf16, strided<[?, ?, 1], offset: ?>>, %arg1: memref<?x32xbf16, strided<[?, 1], offset: ?>>, %arg2: memref<32x?xbf16, strided<[?, 1], offset: ?>>, %arg3: memref<1x?x?xf32, strided<[?, ?, 1], offset: ?>>, %arg4: memref<1x?x32xf32, strided<[?, ?, 1], offset: ?>>, %arg5: memref<1x?xf32, strided<[?, 1], offset: ?>>, %arg6: f32, %arg7: index, %arg8: index) attributes {attnkit.spec = "d32_bf16_bias_vt_g1"} {
    %0 = bufferization.to_tensor %arg0 restrict : memref<1x?x32xbf16, strided<[?, ?, 1], offset: ?>> to tensor<1x?x32xbf16>
    %1 = bufferization.to_tensor %arg1 restrict : memref<?x32xbf16, strided<[?, 1], offset: ?>> to tensor<?x32xbf16>
    %2 = bufferization.to_tensor %arg2 restrict : memref<32x?xbf16, strided<[?, 1], offset: ?>> to tensor<32x?xbf16>
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %0, %c1 : tensor<1x?x32xbf16>
    %c0 = arith.constant 0 : index
    %dim_0 = tensor.dim %1, %c0 : tensor<?x32xbf16>
    %3 = tensor.empty(%dim, %dim_0) : tensor<1x?x?xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<1x?x?xf32>) -> tensor<1x?x?xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%0, %1 : tensor<1x?x32xbf16>, tensor<?x32xbf16>) outs(%4 : tensor<1x?x?xf32>) {
    ^bb0(%in: bf16, %in_4: bf16, %out: f32):
      %24 = arith.extf %in_4 : bf16 to f32
      %25 = arith.extf %in : bf16 to f32
      %26 = arith.mulf %25, %24 fastmath<reassoc,contract> : f32
      %27 = arith.addf %out, %26 fastmath<reassoc,contract> : f32
      linalg.yield %27 : f32
    } -> tensor<1x?x?xf32>
    %6 = bufferization.to_tensor %arg3 restrict : memref<1x?x?xf32, strided<[?, ?, 1], offset: ?>> to tensor<1x?x?xf32>
    %7 = tensor.empty(%dim, %dim_0) : tensor<1x?x?xf32>
    %8 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5, %6 : tensor<1x?x?xf32>, tensor<1x?x?xf32>) outs(%7 : tensor<1x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %24 = arith.mulf %in, %arg6 : f32
      %25 = arith.addf %24, %in_4 : f32
      linalg.yield %25 : f32
    } -> tensor<1x?x?xf32>
    %9 = tensor.empty(%dim) : tensor<1x?xf32>
    %cst_1 = arith.constant 0xFF800000 : f32
    %10 = linalg.fill ins(%cst_1 : f32) outs(%9 : tensor<1x?xf32>) -> tensor<1x?xf32>
    %11 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel", "reduction"]} ins(%8 : tensor<1x?x?xf32>) outs(%10 : tensor<1x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %24 = arith.maximumf %in, %out : f32
      linalg.yield %24 : f32
    } -> tensor<1x?xf32>
    %12 = tensor.empty(%dim, %dim_0) : tensor<1x?x?xf32>
    %13 = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%8, %11 : tensor<1x?x?xf32>, tensor<1x?xf32>) outs(%12 : tensor<1x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0xFF800000 : f32
      %cst_6 = arith.constant 0.000000e+00 : f32
      %24 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %25 = arith.select %24, %cst_6, %in_4 : f32
      %26 = arith.subf %in, %25 : f32
      %27 = math.exp %26 : f32
      linalg.yield %27 : f32
    } -> tensor<1x?x?xf32>
    %14 = tensor.empty(%dim) : tensor<1x?xf32>
    %cst_2 = arith.constant 0.000000e+00 : f32
    %15 = linalg.fill ins(%cst_2 : f32) outs(%14 : tensor<1x?xf32>) -> tensor<1x?xf32>
    %16 = linalg.generic {indexing_maps = [#map3, #map4], iterator_types = ["parallel", "parallel", "reduction"]} ins(%13 : tensor<1x?x?xf32>) outs(%15 : tensor<1x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %24 = arith.addf %out, %in : f32
      linalg.yield %24 : f32
    } -> tensor<1x?xf32>
    %17 = tensor.empty(%dim, %dim_0) : tensor<1x?x?xf32>
    %18 = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13, %16 : tensor<1x?x?xf32>, tensor<1x?xf32>) outs(%17 : tensor<1x?x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0.000000e+00 : f32
      %24 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %25 = arith.divf %in, %in_4 : f32
      %26 = arith.select %24, %cst_5, %25 : f32
      linalg.yield %26 : f32
    } -> tensor<1x?x?xf32>
    %19 = tensor.empty(%dim) : tensor<1x?x32xf32>
    %cst_3 = arith.constant 0.000000e+00 : f32
    %20 = linalg.fill ins(%cst_3 : f32) outs(%19 : tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%18, %2 : tensor<1x?x?xf32>, tensor<32x?xbf16>) outs(%20 : tensor<1x?x32xf32>) {
    ^bb0(%in: f32, %in_4: bf16, %out: f32):
      %24 = arith.extf %in_4 : bf16 to f32
      %25 = arith.mulf %in, %24 fastmath<reassoc,contract> : f32
      %26 = arith.addf %out, %25 fastmath<reassoc,contract> : f32
      linalg.yield %26 : f32
    } -> tensor<1x?x32xf32>
    %22 = tensor.empty(%dim) : tensor<1x?xf32>
    %23 = linalg.generic {indexing_maps = [#map5, #map5, #map5], iterator_types = ["parallel", "parallel"]} ins(%11, %16 : tensor<1x?xf32>, tensor<1x?xf32>) outs(%22 : tensor<1x?xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %cst_5 = arith.constant 0.000000e+00 : f32
      %cst_6 = arith.constant 0xFF800000 : f32
      %24 = arith.cmpf oeq, %in_4, %cst_5 : f32
      %25 = math.log %in_4 : f32
      %cst_7 = arith.constant 0xFF800000 : f32
      %cst_8 = arith.constant 0.000000e+00 : f32
      %26 = arith.cmpf oeq, %in, %cst_7 : f32
      %27 = arith.select %26, %cst_8, %in : f32
      %28 = arith.addf %27, %25 : f32
      %29 = arith.select %24, %cst_6, %28 : f32
      linalg.yield %29 : f32
    } -> tensor<1x?xf32>
    bufferization.materialize_in_destination %21 in restrict writable %arg4 : (tensor<1x?x32xf32>, memref<1x?x32xf32, strided<[?, ?, 1], offset: ?>>) -> ()
    bufferization.materialize_in_destination %23 in restrict writable %arg5 : (tensor<1x?xf32>, memref<1x?xf32, strided<[?, 1], offset: ?>>) -> ()
    return
  }
}
