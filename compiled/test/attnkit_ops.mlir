// The attnkit dialect: attnkit.attention and the flash roles round-trip
// (their verifiers' errors: attnkit_ops_invalid.mlir).
// RUN: attnkit-opt %s --split-input-file | attnkit-opt --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @round_trip
// CHECK:         attnkit.attention q(%{{.*}} : tensor<4x?x64xbf16>) k(%{{.*}} : tensor<?x64xbf16>) v(%{{.*}} : tensor<64x?xbf16>) v_transposed scale(%{{.*}}) bias(%{{.*}} : tensor<4x?x?xf32>) -> tensor<4x?x64xf32>, tensor<4x?xf32> {
// CHECK:         ^bb0(%{{.*}}: index, %{{.*}}: index, %{{.*}}: f32, %{{.*}}: f32):
// CHECK:           attnkit.yield %{{.*}} : f32
func.func @round_trip(%q: tensor<4x?x64xbf16>, %k: tensor<?x64xbf16>,
                      %v: tensor<64x?xbf16>, %scale: f32,
                      %b: tensor<4x?x?xf32>, %p0: index)
    -> (tensor<4x?x64xf32>, tensor<4x?xf32>) {
  %o, %lse = attnkit.attention q(%q : tensor<4x?x64xbf16>)
      k(%k : tensor<?x64xbf16>) v(%v : tensor<64x?xbf16>) v_transposed
      scale(%scale) bias(%b : tensor<4x?x?xf32>)
      -> tensor<4x?x64xf32>, tensor<4x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32, %bias: f32):
    %pos = arith.addi %i, %p0 : index
    %keep = arith.cmpi sle, %j, %pos : index
    %s = arith.addf %x, %bias : f32
    %ninf = arith.constant 0xFF800000 : f32
    %r = arith.select %keep, %s, %ninf : f32
    attnkit.yield %r : f32
  }
  return %o, %lse : tensor<4x?x64xf32>, tensor<4x?xf32>
}

// -----

// CHECK-LABEL: func.func @roles
// CHECK:         } {attnkit.flash_role = #attnkit.flash_role<kv_loop>}
// CHECK:       } {attnkit.flash_role = #attnkit.flash_role<query_loop>}
func.func @roles(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %n step %c1 {
    } {attnkit.flash_role = #attnkit.flash_role<kv_loop>}
  } {attnkit.flash_role = #attnkit.flash_role<query_loop>}
  return
}

// -----

// A quantized KV cache: i8 K/V, one f32 scale per key.
// CHECK-LABEL: func.func @quantized_kv
// CHECK:         attnkit.attention q(%{{.*}} : tensor<2x?x64xf32>) k(%{{.*}} : tensor<?x64xi8>) k_scale(%{{.*}} : tensor<?xf32>) v(%{{.*}} : tensor<?x64xi8>) v_scale(%{{.*}} : tensor<?xf32>) scale(%{{.*}}) -> tensor<2x?x64xf32>, tensor<2x?xf32> {
func.func @quantized_kv(%q: tensor<2x?x64xf32>, %k: tensor<?x64xi8>,
                        %ks: tensor<?xf32>, %v: tensor<?x64xi8>,
                        %vs: tensor<?xf32>, %scale: f32)
    -> (tensor<2x?x64xf32>, tensor<2x?xf32>) {
  %o, %lse = attnkit.attention q(%q : tensor<2x?x64xf32>)
      k(%k : tensor<?x64xi8>) k_scale(%ks : tensor<?xf32>)
      v(%v : tensor<?x64xi8>) v_scale(%vs : tensor<?xf32>) scale(%scale)
      -> tensor<2x?x64xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return %o, %lse : tensor<2x?x64xf32>, tensor<2x?xf32>
}
