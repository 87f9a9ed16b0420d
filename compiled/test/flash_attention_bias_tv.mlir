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

module {
  func.func @attention(%arg0: memref<1x?x32xbf16, strided<[?, ?, 1], offset: ?>>, %arg1: memref<?x32xbf16, strided<[?, 1], offset: ?>>, %arg2: memref<32x?xbf16, strided<[?, 1], offset: ?>>, %arg3: memref<1x?x?xf32, strided<[?, ?, 1], offset: ?>>, %arg4: memref<1x?x32xf32, strided<[?, ?, 1], offset: ?>>, %arg5: memref<1x?xf32, strided<[?, 1], offset: ?>>, %arg6: f32, %arg7: index, %arg8: index) attributes {attnkit.spec = "d32_bf16_bias_vt_g1"} {
    %0 = bufferization.to_tensor %arg0 restrict : memref<1x?x32xbf16, strided<[?, ?, 1], offset: ?>> to tensor<1x?x32xbf16>
    %1 = bufferization.to_tensor %arg1 restrict : memref<?x32xbf16, strided<[?, 1], offset: ?>> to tensor<?x32xbf16>
    %2 = bufferization.to_tensor %arg2 restrict : memref<32x?xbf16, strided<[?, 1], offset: ?>> to tensor<32x?xbf16>
    %3 = bufferization.to_tensor %arg3 restrict : memref<1x?x?xf32, strided<[?, ?, 1], offset: ?>> to tensor<1x?x?xf32>
    %output, %lse = attnkit.attention q(%0 : tensor<1x?x32xbf16>) k(%1 : tensor<?x32xbf16>) v(%2 : tensor<32x?xbf16>) v_transposed scale(%arg6) bias(%3 : tensor<1x?x?xf32>) -> tensor<1x?x32xf32>, tensor<1x?xf32> {
    ^bb0(%arg9: index, %arg10: index, %arg11: f32, %arg12: f32):
      %4 = arith.addf %arg11, %arg12 : f32
      attnkit.yield %4 : f32
    }
    bufferization.materialize_in_destination %output in restrict writable %arg4 : (tensor<1x?x32xf32>, memref<1x?x32xf32, strided<[?, ?, 1], offset: ?>>) -> ()
    bufferization.materialize_in_destination %lse in restrict writable %arg5 : (tensor<1x?xf32>, memref<1x?xf32, strided<[?, 1], offset: ?>>) -> ()
    return
  }
}

