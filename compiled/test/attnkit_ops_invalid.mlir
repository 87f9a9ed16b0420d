// The attnkit dialect's verifiers name what is wrong.
// RUN: attnkit-opt %s --split-input-file --verify-diagnostics

func.func @bad_rank(%q: tensor<?x16xf32>, %k: tensor<?x16xf32>,
                    %v: tensor<?x16xf32>, %s: f32) {
  // expected-error @+1 {{expects q of rank 3 (G x M x D) with k and v of rank 2, or q of rank 4 (H x G x M x D) with k and v of rank 3; got ranks 2, 2, 2}}
  %o, %l = attnkit.attention q(%q : tensor<?x16xf32>) k(%k : tensor<?x16xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @bad_head_dim(%q: tensor<2x?x16xf32>, %k: tensor<?x8xf32>,
                        %v: tensor<?x16xf32>, %s: f32) {
  // expected-error @+1 {{expects k and v rows of head_dim 16}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x8xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @mixed_types(%q: tensor<2x?x16xbf16>, %k: tensor<?x16xf32>,
                       %v: tensor<?x16xf32>, %s: f32) {
  // expected-error @+1 {{expects q, k and v of one element type}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xbf16>) k(%k : tensor<?x16xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @bias_without_argument(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                                 %v: tensor<?x16xf32>, %s: f32,
                                 %b: tensor<2x?x?xf32>) {
  // expected-error @+1 {{expects modifier arguments (index, index, f32, f32)}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) bias(%b : tensor<2x?x?xf32>)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @bad_lse(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                   %v: tensor<?x16xf32>, %s: f32) {
  // expected-error @+1 {{expects an f32 lse of G x M, got 'tensor<3x?xf32>'}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xf32>)
      v(%v : tensor<?x16xf32>) scale(%s) -> tensor<2x?x16xf32>, tensor<3x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @role_on_wrong_op(%x: f32) -> f32 {
  // expected-error @+1 {{'arith.addf' op 'attnkit.flash_role' qk must be on a linalg.generic}}
  %y = arith.addf %x, %x {attnkit.flash_role = #attnkit.flash_role<qk>} : f32
  return %y : f32
}

// -----

func.func @kv_loop_alone(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'attnkit.flash_role' kv_loop must lie in a query_loop}}
  scf.for %j = %c0 to %n step %c1 {
  } {attnkit.flash_role = #attnkit.flash_role<kv_loop>}
  return
}

// -----

func.func @last_row_outside_a_query_loop(%i: index) -> index {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'attnkit.flash_role' last_row must be on an op of one index result in a query_loop}}
  %r = arith.subi %i, %c1 {attnkit.flash_role = #attnkit.flash_role<last_row>} : index
  return %r : index
}

// -----

func.func @unknown_attribute(%x: f32) -> f32 {
  // expected-error @+1 {{unknown attnkit attribute 'attnkit.flash.qk'}}
  %y = arith.addf %x, %x {attnkit.flash.qk} : f32
  return %y : f32
}

// -----

// With a KV-head dimension every operand and result leads with q's heads.
func.func @heads_disagree(%q: tensor<2x2x?x16xf32>, %k: tensor<3x?x16xf32>,
                          %v: tensor<3x?x16xf32>, %s: f32) {
  // expected-error @+1 {{expects every operand and result to lead with q's 2 KV heads}}
  %o, %l = attnkit.attention q(%q : tensor<2x2x?x16xf32>)
      k(%k : tensor<3x?x16xf32>) v(%v : tensor<3x?x16xf32>) scale(%s)
      -> tensor<2x2x?x16xf32>, tensor<2x2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @i8_without_scales(%q: tensor<2x?x16xf32>, %k: tensor<?x16xi8>,
                             %v: tensor<?x16xi8>, %s: f32) {
  // expected-error @+1 {{expects k_scale and v_scale with i8 k and v}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xi8>)
      v(%v : tensor<?x16xi8>) scale(%s) -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @one_scale(%q: tensor<2x?x16xf32>, %k: tensor<?x16xi8>,
                     %ks: tensor<?xf32>, %v: tensor<?x16xi8>, %s: f32) {
  // expected-error @+1 {{expects both k_scale and v_scale or neither}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xi8>)
      k_scale(%ks : tensor<?xf32>) v(%v : tensor<?x16xi8>) scale(%s)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @scales_on_f32(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                         %ks: tensor<?xf32>, %v: tensor<?x16xf32>,
                         %vs: tensor<?xf32>, %s: f32) {
  // expected-error @+1 {{expects i8 k and v with k_scale and v_scale}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<?x16xf32>)
      k_scale(%ks : tensor<?xf32>) v(%v : tensor<?x16xf32>)
      v_scale(%vs : tensor<?xf32>) scale(%s)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}

// -----

func.func @scale_per_dim(%q: tensor<2x?x16xf32>, %k: tensor<8x16xi8>,
                         %ks: tensor<16xf32>, %v: tensor<8x16xi8>,
                         %vs: tensor<16xf32>, %s: f32) {
  // expected-error @+1 {{expects f32 k_scale and v_scale of one scale per key, got 'tensor<16xf32>'}}
  %o, %l = attnkit.attention q(%q : tensor<2x?x16xf32>) k(%k : tensor<8x16xi8>)
      k_scale(%ks : tensor<16xf32>) v(%v : tensor<8x16xi8>)
      v_scale(%vs : tensor<16xf32>) scale(%s)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return
}
