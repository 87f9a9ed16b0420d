// attnkit-opt: mlir-opt with every upstream dialect and pass plus ours
// (attnkit-flash-attention, attnkit-approximate-math, attnkit-lower-to-llvm).
#include "compiled/ir_builder.h"
#include "compiled/passes.h"
#include "compiled/pipeline.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  attnkit::compiled::registerAttnkitPasses();
  attnkit::compiled::registerAttnkitPipelines();
  mlir::DialectRegistry registry;
  attnkit::compiled::registerCompiledDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attnkit optimizer driver\n", registry));
}
