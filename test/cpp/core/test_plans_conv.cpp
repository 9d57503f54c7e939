// Golden plans of the f32 forward / backward-data driver
// (conv_f32_common.cpp): describe_conv_f32 for the problems of
// test_fast_conv.cpp, the benchmark layers (benchmarks/cases.py, IOX and
// OIX weights), a few extremes and random geometries; both passes, both ISAs
// (planned only: no CPU support needed), 1, 2, 4 and 16 threads; compared
// with test/golden/plans_conv.txt. TCT_UPDATE_GOLDEN=1 rewrites the file.
#include <gtest/gtest.h>

#include "dense_views.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/x86/conv_f32_plan.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

using WF = WeightsFormat;

struct Layer {
  std::string name;
  int S;
  int64_t N, G, ICg, OCg;
  std::vector<int64_t> I, K, s, d, pb, pe, op;
  WF wf;
};

// The problems of test_fast_conv.cpp (its test name and rank in the test).
const std::vector<Layer> kTestLayers = {
    {"HandPicked1", 2, 2, 1, 64, 32, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"HandPicked2", 2, 1, 1, 32, 48, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"HandPicked3", 2, 1, 1, 20, 70, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"HandPicked4", 2, 1, 1, 17, 130, {3, 4}, {2, 3}, {2, 1}, {1, 1}, {0, 1}, {1, 0}, {}, WF::IOX},
    {"HandPicked5", 1, 3, 1, 16, 16, {9}, {5}, {3}, {1}, {2}, {1}, {2}, WF::IOX},
    {"HandPicked6", 3, 1, 1, 8, 24, {3, 4, 5}, {3, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 0, 2}, {0, 1, 1}, {}, WF::IOX},
    {"HandPicked7", 2, 2, 1, 5, 7, {4, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"HandPicked8", 2, 1, 1, 3, 5, {3, 3}, {1, 2}, {3, 4}, {1, 1}, {0, 0}, {0, 0}, {2, 3}, WF::IOX},
    {"HandPicked9", 1, 1, 1, 9, 33, {4}, {2}, {5}, {1}, {0}, {1}, {4}, WF::IOX},
    {"HandPicked10", 2, 1, 1, 6, 18, {4, 5}, {3, 2}, {1, 2}, {3, 2}, {2, 0}, {0, 3}, {2, 1}, WF::IOX},
    {"HandPicked11", 2, 2, 4, 4, 8, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"HandPicked12", 2, 2, 24, 1, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"HandPicked13", 2, 1, 37, 1, 1, {5, 4}, {4, 4}, {2, 2}, {1, 1}, {1, 2}, {2, 1}, {1, 0}, WF::IOX},
    {"HandPicked14", 1, 2, 70, 1, 1, {11}, {3}, {2}, {2}, {1}, {0}, {}, WF::IOX},
    {"HandPicked15", 2, 1, 6, 1, 3, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"HandPicked16", 2, 1, 5, 3, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"HandPicked17", 3, 1, 3, 2, 2, {3, 3, 3}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 1, 0}, {}, WF::IOX},
    {"HandPicked18", 2, 1, 1, 4, 4, {7, 7}, {2, 2}, {1, 1}, {1, 1}, {3, 2}, {2, 3}, {}, WF::IOX},
    {"HandPicked19", 2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, WF::XOI},
    {"HandPicked20", 2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, WF::OIX},
    {"HandPicked21", 2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, WF::XIO},
    {"HandPicked22", 3, 1, 1, 3, 17, {2, 3, 2}, {2, 2, 3}, {1, 2, 1}, {1, 1, 2}, {0, 1, 1}, {1, 0, 1}, {0, 1, 0}, WF::XOI},
    {"OnePixelCovering1_IOX", 2, 9, 1, 7, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"OnePixelCovering1_XOI", 2, 9, 1, 7, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::XOI},
    {"OnePixelCovering1_OIX", 2, 9, 1, 7, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::OIX},
    {"OnePixelCovering1_XIO", 2, 9, 1, 7, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::XIO},
    {"OnePixelCovering2", 2, 5, 1, 10, 1, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"OnePixelCovering3", 3, 3, 1, 5, 2, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"OnePixelCovering4", 1, 6, 1, 13, 16, {1}, {3}, {2}, {1}, {0}, {0}, {0}, WF::IOX},
    {"OnePixelCovering5", 2, 4, 2, 3, 4, {1, 1}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"FewColumns1", 2, 1, 1, 36, 4, {7, 9}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"FewColumns2", 2, 2, 1, 64, 3, {9, 10}, {7, 7}, {2, 2}, {2, 2}, {3, 3}, {2, 2}, {1, 1}, WF::IOX},
    {"FewColumns3", 2, 1, 1, 64, 3, {6, 6}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"FewColumns4", 1, 2, 1, 17, 1, {13}, {3}, {1}, {1}, {1}, {1}, {}, WF::IOX},
    {"FewColumns5", 1, 1, 1, 33, 2, {11}, {4}, {3}, {2}, {2}, {0}, {1}, WF::IOX},
    {"FewColumns6", 3, 1, 1, 20, 4, {3, 4, 5}, {3, 2, 2}, {2, 1, 2}, {1, 2, 1}, {1, 0, 1}, {0, 1, 0}, {}, WF::IOX},
    {"FewColumns7", 2, 1, 2, 20, 2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::XOI},
    {"FewColumns8", 2, 1, 3, 48, 3, {4, 5}, {2, 3}, {1, 2}, {1, 1}, {0, 1}, {1, 0}, {}, WF::OIX},
    {"FewColumns9", 2, 1, 1, 2, 40, {5, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"FewColumns10", 2, 1, 1, 4, 16, {6, 6}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::XIO},
    {"FewColumns11", 2, 2, 1, 36, 4, {5, 11}, {3, 3}, {3, 3}, {1, 1}, {1, 0}, {2, 1}, {}, WF::IOX},
    {"FewColumns12", 2, 1, 1, 5, 3, {4, 3}, {2, 3}, {2, 3}, {1, 1}, {1, 2}, {0, 1}, {}, WF::XIO},
    {"FewColumns13", 1, 3, 1, 40, 7, {9}, {4}, {4}, {1}, {3}, {0}, {}, WF::OIX},
    {"FewColumns14", 3, 1, 1, 9, 2, {3, 2, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}, {}, WF::XOI},
    {"FewColumns15", 2, 1, 1, 700, 5, {3, 4}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"FewColumns16", 3, 1, 1, 16, 20, {3, 4, 4}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"FewColumns17", 2, 2, 1, 8, 40, {4, 5}, {3, 3}, {1, 1}, {3, 2}, {1, 0}, {0, 1}, {}, WF::IOX},
    {"FewColumns18", 2, 1, 2, 12, 9, {3, 3}, {4, 3}, {2, 1}, {2, 3}, {1, 1}, {2, 0}, {1, 0}, WF::IOX},
    {"FewColumns19", 2, 2, 1, 24, 48, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"FewColumns20", 3, 1, 1, 20, 40, {5, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"FewColumns21", 2, 2, 1, 24, 16, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {}, WF::XOI},
    {"LargerLayers1", 2, 1, 1, 64, 32, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"LargerLayers2", 2, 1, 1, 96, 200, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"LargerLayers3", 1, 2, 1, 40, 64, {50}, {7}, {4}, {1}, {2}, {3}, {}, WF::IOX},
    {"LargerLayers4", 2, 1, 64, 1, 1, {20, 20}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, {1, 1}, WF::IOX},
    {"LargerLayers5", 2, 4, 32, 1, 1, {64, 66}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {}, WF::IOX},
    {"LargerLayers6", 2, 2, 48, 1, 1, {64, 66}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {}, WF::IOX},
    {"LargerLayers7", 2, 2, 32, 4, 4, {9, 9}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"LargerLayers8", 2, 1, 1, 128, 256, {3, 3}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"LargerLayers9", 3, 1, 1, 16, 160, {2, 2, 2}, {4, 4, 4}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {}, WF::IOX},
    {"LargerLayers10", 3, 1, 1, 160, 128, {3, 3, 3}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"LargerLayers11", 3, 1, 1, 128, 256, {2, 2, 2}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"LargerLayers12", 3, 2, 1, 24, 40, {3, 4, 3}, {3, 3, 3}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 0}, {1, 0, 1}, WF::IOX},
    {"LargerLayers13", 2, 1, 1, 40, 200, {5, 5}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"LargerLayers14", 2, 2, 1, 70, 24, {6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, {1, 0}, WF::IOX},
    {"LargerLayers15", 2, 2, 1, 24, 70, {6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, {1, 0}, WF::OIX},
    {"DepthwiseLines1", 2, 2, 64, 1, 1, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"DepthwiseLines2", 2, 1, 17, 1, 1, {9, 24}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"DepthwiseLines3", 2, 2, 40, 1, 1, {8, 8}, {3, 3}, {2, 2}, {2, 2}, {2, 1}, {0, 2}, {1, 1}, WF::IOX},
    {"DepthwiseLines4", 2, 1, 40, 1, 1, {6, 15}, {3, 3}, {1, 1}, {2, 2}, {2, 1}, {0, 2}, {}, WF::IOX},
    {"DepthwiseLines5", 2, 1, 20, 1, 1, {6, 16}, {2, 3}, {1, 1}, {1, 1}, {2, 1}, {0, 1}, {}, WF::IOX},
    {"DepthwiseLines6", 2, 1, 32, 1, 1, {5, 16}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, WF::IOX},
    {"DepthwiseLines7", 1, 3, 24, 1, 1, {64}, {5}, {3}, {1}, {2}, {2}, {}, WF::IOX},
    {"DepthwiseLines8", 3, 1, 16, 1, 1, {3, 4, 16}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 0, 2}, {1, 2, 0}, {0, 1, 0}, WF::IOX},
    {"DepthwiseLines9", 2, 3, 48, 1, 1, {40, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"FusedBackwardDataLines1", 2, 2, 1, 64, 3, {12, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
    {"FusedBackwardDataLines2", 2, 1, 1, 36, 4, {10, 50}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"FusedBackwardDataLines3", 2, 1, 1, 40, 4, {6, 30}, {3, 3}, {3, 3}, {1, 1}, {2, 1}, {2, 0}, {1, 2}, WF::IOX},
    {"FusedBackwardDataLines4", 2, 1, 1, 32, 3, {5, 48}, {2, 3}, {1, 1}, {1, 1}, {2, 1}, {0, 1}, {}, WF::IOX},
    {"FusedBackwardDataLines5", 1, 2, 1, 80, 2, {40}, {2}, {1}, {1}, {0}, {0}, {}, WF::IOX},
    {"FusedBackwardDataLines6", 3, 1, 1, 24, 3, {3, 4, 24}, {3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}, WF::IOX},
    {"FusedBackwardDataLines7", 2, 3, 1, 48, 5, {9, 31}, {3, 5}, {2, 2}, {1, 1}, {1, 2}, {1, 1}, {1, 1}, WF::IOX},
    {"FusedBackwardDataLines8", 3, 2, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {3, 3, 3}, {2, 2, 2}, {}, WF::IOX},
    {"FusedBackwardDataLines9", 2, 2, 1, 20, 6, {7, 9}, {4, 4}, {1, 1}, {1, 1}, {3, 4}, {3, 3}, {}, WF::IOX},
    {"LargeOutputsStreamed1", 2, 1, 1, 36, 4, {241, 499}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"LargeOutputsStreamed2", 2, 1, 1, 36, 4, {241, 500}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"LargeOutputsStreamed3", 2, 1, 1, 8, 96, {112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"PackedWeightsStreamed1", 2, 2, 1, 256, 300, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"PackedWeightsStreamed2", 2, 1, 1, 300, 256, {2, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, {1, 1}, WF::XOI},
    {"PackedWeightsStreamed3", 1, 1, 1, 128, 260, {5}, {16}, {8}, {1}, {4}, {4}, {}, WF::IOX},
    {"ColumnBlocksPackedByTheirItems1_IOX", 2, 1, 1, 256, 200, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"ColumnBlocksPackedByTheirItems1_XOI", 2, 1, 1, 256, 200, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::XOI},
    {"ColumnBlocksPackedByTheirItems1_OIX", 2, 1, 1, 256, 200, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::OIX},
    {"ColumnBlocksPackedByTheirItems2", 3, 1, 1, 144, 96, {2, 2, 2}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {}, WF::IOX},
    {"ColumnBlocksPackedByTheirItems3", 3, 1, 1, 320, 320, {3, 3, 2}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {}, WF::IOX},
    {"ThreadCounts1", 2, 1, 1, 24, 40, {7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, WF::IOX},
    {"ThreadCounts2", 1, 2, 6, 2, 3, {17}, {4}, {3}, {1}, {1}, {2}, {}, WF::IOX},
    {"ZeroSizes1", 2, 2, 1, 0, 5, {3, 3}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"ZeroSizes2", 2, 2, 1, 5, 0, {3, 3}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {}, WF::IOX},
    {"ZeroSizes3", 1, 1, 3, 0, 2, {4}, {3}, {1}, {1}, {1}, {1}, {}, WF::IOX},
    {"ZeroSizes4", 2, 0, 1, 4, 4, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, WF::IOX},
};

// benchmarks/cases.py (N, ICg/OCg per group, graph pads).
const std::vector<Layer> kBenchLayers = {
    {"1d_alexnet_deconv3", 1, 32, 1, 384, 256, {13}, {3}, {1}, {1}, {1}, {1}, {0}, WF::IOX},
    {"1d_googlenet_conv1_s2", 1, 32, 1, 64, 3, {112}, {7}, {2}, {1}, {3}, {2}, {0}, WF::IOX},
    {"1d_masknet_deconv1_op1", 1, 16, 1, 64, 3, {512}, {7}, {2}, {1}, {0}, {0}, {1}, WF::IOX},
    {"1d_dilated_asym_pads", 1, 64, 1, 8, 8, {5}, {3}, {1}, {3}, {3}, {6}, {0}, WF::IOX},
    {"1d_vocoder_512to256_k16s8", 1, 1, 1, 512, 256, {283}, {16}, {8}, {1}, {4}, {4}, {0}, WF::IOX},
    {"1d_ci_tail_depthwise", 1, 64, 17, 1, 1, {5}, {3}, {1}, {1}, {1}, {1}, {0}, WF::IOX},
    {"2d_alexnet_deconv1_k11s4", 2, 4, 1, 96, 3, {55, 55}, {11, 11}, {4, 4}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"2d_alexnet_deconv2_g2", 2, 2, 2, 128, 48, {27, 27}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, {0, 0}, WF::IOX},
    {"2d_googlenet_4d_3x3", 2, 8, 1, 288, 144, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"2d_googlenet_4a_1x1", 2, 16, 1, 192, 480, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"2d_resnet50_1x1_s2_op1", 2, 4, 1, 256, 512, {28, 28}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, WF::IOX},
    {"2d_alexnet_dil3_g2", 2, 8, 2, 192, 192, {9, 9}, {3, 3}, {1, 1}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"2d_googlenet_conv1_s2_d2", 2, 4, 1, 64, 3, {109, 109}, {7, 7}, {2, 2}, {2, 2}, {3, 3}, {2, 2}, {0, 0}, WF::IOX},
    {"2d_512to256_k4s2_32x32", 2, 1, 1, 512, 256, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"2d_unet_1024to512_k2s2", 2, 1, 1, 1024, 512, {23, 30}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"2d_512to512_k3s2_4x4", 2, 4, 1, 512, 512, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"2d_36to4_k3s3_360x640", 2, 1, 1, 36, 4, {360, 640}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"2d_ci_oc_tail_gemm", 2, 32, 1, 16, 17, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {3, 3}, {2, 2}, {0, 0}, WF::IOX},
    {"2d_ci_oc_tail_grouped", 2, 32, 4, 4, 5, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"2d_ci_tail_depthwise", 2, 64, 17, 1, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"3d_unet_deconv8", 3, 1, 1, 512, 256, {8, 9, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"3d_unet_dilated_deconv8", 3, 1, 1, 512, 256, {6, 7, 7}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"3d_unet_320to320_k2s2", 3, 1, 1, 320, 320, {7, 7, 5}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"3d_1x1_s2", 3, 16, 1, 16, 16, {5, 5, 5}, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"3d_ci_grouped", 3, 8, 4, 4, 4, {5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, WF::IOX},
    {"3d_ci_depthwise", 3, 8, 16, 1, 1, {5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, WF::IOX},
    {"3d_ci_ic_tail_gemm", 3, 8, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {3, 3, 3}, {2, 2, 2}, {0, 0, 0}, WF::IOX},
    {"dcgan_z_100to512_k4", 2, 64, 1, 100, 512, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"dcgan_512to256_8x8", 2, 4, 1, 512, 256, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"dcgan_256to128_16x16", 2, 4, 1, 256, 128, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"dcgan_128to64_32x32", 2, 4, 1, 128, 64, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"dcgan_64to3_64x64", 2, 4, 1, 64, 3, {64, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
    {"unet2d_128to64_k2s2_64x64", 2, 2, 1, 128, 64, {64, 64}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, WF::IOX},
    {"unet3d_128to64_k2s2_16^3", 3, 1, 1, 128, 64, {16, 16, 16}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"unet3d_256to128_k2s2_8^3", 3, 2, 1, 256, 128, {8, 8, 8}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, WF::IOX},
    {"hifigan_512to256_k16s8", 1, 1, 1, 512, 256, {256}, {16}, {8}, {1}, {4}, {4}, {0}, WF::IOX},
    {"hifigan_128to64_k4s2", 1, 1, 1, 128, 64, {4096}, {4}, {2}, {1}, {1}, {1}, {0}, WF::IOX},
    {"dw_up_64ch_k4s2_32x32", 2, 8, 64, 1, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, WF::IOX},
};

// Extremes: a 1D signal long enough for a lazy axis, a large 2D k2 s2, one
// channel, a huge stride on a tiny output.
const std::vector<Layer> kExtremeLayers = {
    {"lazy_1d_70000", 1, 1, 1, 8, 8, {70000}, {4}, {2}, {1}, {1}, {1}, {0}, WF::IOX},
    {"lazy_1d_bwd_k16", 1, 2, 1, 16, 4, {20000}, {16}, {8}, {1}, {4}, {4}, {0}, WF::IOX},
    {"big_2d_k2s2", 2, 1, 1, 16, 16, {512, 512}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0},
     WF::IOX},
    {"one_channel", 2, 1, 1, 1, 1, {3, 3}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0},
     WF::IOX},
    {"stride_past_output", 1, 2, 1, 4, 4, {1}, {2}, {1000}, {2}, {0}, {0}, {0}, WF::IOX},
    // One output position of a stride of 2^60 (as the fuzz found): the backward-data
    // prefetch distance (stride x rows) once overflowed (UBSan, the sanitizer build).
    {"huge_stride", 1, 1, 1, 1, 1, {2}, {1}, {int64_t{1} << 60}, {1}, {0}, {int64_t{1} << 60},
     {0}, WF::IOX},
};

// Random geometries (a fixed splitmix64 stream, so the file is the same
// everywhere): every rank, depthwise, small groups, few columns, dilation,
// pads, output padding, every weights layout.
std::vector<Layer> random_layers(int count) {
  uint64_t state = 20;
  auto next = [&]() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto uni = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  };
  const WF wfs[] = {WF::IOX, WF::XOI, WF::OIX, WF::XIO};
  std::vector<Layer> v;
  while (static_cast<int>(v.size()) < count) {
    Layer c;
    c.name = "random" + std::to_string(v.size() + 1);
    c.S = static_cast<int>(uni(1, 3));
    c.N = uni(1, 4);
    const int64_t kind = uni(0, 4);
    c.G = kind == 0 ? uni(2, 40) : kind == 1 ? uni(2, 6) : 1;
    c.ICg = kind == 0 ? 1 : kind == 1 ? uni(1, 8) : uni(1, 200);
    c.OCg = kind == 0 ? 1 : kind == 1 ? uni(1, 8) : kind == 2 ? uni(1, 4) : uni(1, 300);
    for (int i = 0; i < c.S; ++i) {
      c.I.push_back(uni(1, c.S == 3 ? 6 : c.S == 2 ? 20 : 60));
      c.K.push_back(uni(1, c.S == 3 ? 3 : 5));
      c.s.push_back(uni(1, 4));
      c.d.push_back(uni(0, 3) == 0 ? uni(2, 3) : 1);
      const int64_t effk = c.d[i] * (c.K[i] - 1) + 1;
      c.pb.push_back(uni(0, effk - 1));
      c.pe.push_back(uni(0, effk - 1));
      c.op.push_back(uni(0, std::max(c.s[i], c.d[i]) - 1));
      if (c.s[i] * (c.I[i] - 1) + effk + c.op[i] - c.pb[i] - c.pe[i] < 1) c.pb[i] = c.pe[i] = 0;
    }
    c.wf = wfs[uni(0, 3)];
    v.push_back(c);
  }
  return v;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The forward and backward-data problems of a layer and its weights' strides.
struct Problems {
  ConvProblem fwd, bwd;
  WeightsView w;
};

Problems resolve(const Layer& c) {
  Attributes a;
  a.strides = c.s;
  a.dilations = c.d;
  a.pads_begin = c.pb;
  a.pads_end = c.pe;
  a.output_padding = c.op.empty() ? std::vector<int64_t>(c.S, 0) : c.op;
  a.groups = c.G;
  a.data_format = DataFormat::NXC;
  a.weights_format = c.wf;
  Shape logical{c.G * c.ICg, c.OCg};
  for (int i = 0; i < c.S; ++i) logical.push_back(c.K[i]);
  const std::vector<int> dims = weights_dims(c.wf, c.S);
  Shape wshape(c.S + 2, 0);
  for (int l = 0; l < c.S + 2; ++l) wshape[dims[l]] = logical[l];
  Shape src{c.N};
  for (int i = 0; i < c.S; ++i) src.push_back(c.I[i]);
  src.push_back(c.G * c.ICg);
  Problems r;
  r.fwd = resolve_forward(src, wshape, std::nullopt, a);
  r.bwd = resolve_backward_data(dst_shape(r.fwd, DataFormat::NXC), wshape, src, a);
  r.w = testing_views::dense_weights_view(nullptr, wshape, c.wf, c.S);
  return r;
}

// key -> description, for every layer, pass, ISA and thread count.
std::map<std::string, std::string> plans() {
  std::vector<Layer> all = kTestLayers;
  for (const std::vector<Layer>& more : {kBenchLayers, kExtremeLayers, random_layers(40)})
    all.insert(all.end(), more.begin(), more.end());
  for (Layer c : kBenchLayers) {
    c.name += "_OIX";
    c.wf = WF::OIX;
    all.push_back(c);
  }
  std::map<std::string, std::string> out;
  for (const Layer& c : all) {
    const Problems pr = resolve(c);
    const std::string geom = " S=" + std::to_string(c.S) + " N=" + std::to_string(c.N) +
                             " G=" + std::to_string(c.G) + " ICg=" + std::to_string(c.ICg) +
                             " OCg=" + std::to_string(c.OCg) + " I=" + join(c.I) +
                             " K=" + join(c.K) + " s=" + join(c.s) + " d=" + join(c.d) +
                             " pb=" + join(c.pb) + " pe=" + join(c.pe) + " op=" + join(c.op) +
                             " wf=" + to_string(c.wf);
    for (Pass pass : {Pass::Forward, Pass::BackwardData})
      for (Isa isa : {Isa::Avx512, Isa::Avx2})
        for (int nt : {1, 2, 4, 16}) {
          const std::string key = c.name + (pass == Pass::Forward ? " fwd " : " bwd_data ") +
                                  isa_name(isa) + " t" + std::to_string(nt) + geom;
          const ConvProblem& p = pass == Pass::Forward ? pr.fwd : pr.bwd;
          EXPECT_TRUE(out.emplace(key, x86::describe_conv_f32(isa, pass, p, pr.w, nt)).second)
              << "duplicate key " << key;
        }
  }
  return out;
}

TEST(PlansConv, MatchGolden) {
  const std::string path = std::string(TCT_SOURCE_DIR) + "/test/golden/plans_conv.txt";
  // The golden plans hold no CPU's own tile speeds (Zen 3's AVX2 table
  // differs): pinned, so that they compare on any CPU.
  const Uarch saved = active_uarch();
  set_uarch(Uarch::Generic);
  const std::map<std::string, std::string> got = plans();
  set_uarch(saved);
  const char* update = std::getenv("TCT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream f(path);
    for (const auto& [key, plan] : got) f << key << " | " << plan << '\n';
    ASSERT_TRUE(f.good()) << "cannot write " << path;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing " << path << " (TCT_UPDATE_GOLDEN=1 writes it)";
  std::map<std::string, std::string> want;
  for (std::string line; std::getline(f, line);) {
    const size_t bar = line.find(" | ");
    ASSERT_NE(bar, std::string::npos) << line;
    want[line.substr(0, bar)] = line.substr(bar + 3);
  }
  int bad = 0;
  for (const auto& [key, plan] : got) {
    const auto it = want.find(key);
    if (it == want.end()) {
      ADD_FAILURE() << "not in the golden file: " << key;
    } else if (it->second != plan) {
      ADD_FAILURE() << key << "\n  golden: " << it->second << "\n  now:    " << plan;
    } else {
      continue;
    }
    if (++bad >= 20) return;
  }
  EXPECT_EQ(got.size(), want.size()) << "golden cases that no longer exist";
}

// describe_conv_f32 of x86.h (no weights given) plans dense IOX weights.
TEST(PlansConv, DefaultWeightsAreIox) {
  const Layer& c = kBenchLayers[0];
  const Problems pr = resolve(c);
  EXPECT_EQ(x86::describe_conv_f32(Isa::Avx512, Pass::Forward, pr.fwd, 4),
            x86::describe_conv_f32(Isa::Avx512, Pass::Forward, pr.fwd, pr.w, 4));
  EXPECT_EQ(x86::describe_conv_f32(Isa::Reference, Pass::Forward, pr.fwd, 4),
            "conv pass=forward route=reference");
}

// Heuristics C21, AVX2 only: plans with an input prefetch prefetch every
// line of a tap's run where each input is read once (backward-data with
// K <= s / gcd(s, d) on every axis; forward with 1x1 kernels), and by rows
// only in a row block's first pass. 64 channels on the reduction side (128
// -> 64 backward-data, 64 -> 64 forward), so that the tiles prefetch at all
// (runs of <= 64 inputs a tap).
TEST(PlansConv, InputPrefetchRunsReadOnce) {
  auto plan = [](Isa isa, Pass pass, std::vector<int64_t> K, std::vector<int64_t> s,
                 std::vector<int64_t> d) {
    const std::vector<int64_t> pads(K.size(), 0), I(K.size(), 32);
    const int64_t ICg = pass == Pass::Forward ? 64 : 128;
    const Layer c{"rule", static_cast<int>(K.size()), 2, 1, ICg, 64, I, K, s, d, pads, pads, {}, WF::IOX};
    const Problems pr = resolve(c);
    return x86::describe_conv_f32(isa, pass, pass == Pass::Forward ? pr.fwd : pr.bwd, pr.w, 2);
  };
  auto has = [](const std::string& plan, const char* what) {
    return plan.find(what) != std::string::npos;
  };
  struct Case {
    Pass pass;
    std::vector<int64_t> K, s, d;
    bool once;
  };
  const std::vector<Case> cases = {
      {Pass::BackwardData, {2, 2}, {2, 2}, {1, 1}, true},   // the k2 s2 upsampler
      {Pass::BackwardData, {3}, {3}, {1}, true},            // K = s
      {Pass::BackwardData, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, true},
      {Pass::BackwardData, {4, 4}, {2, 2}, {1, 1}, false},  // overlapping taps
      {Pass::BackwardData, {2, 3}, {2, 2}, {1, 1}, false},  // one axis overlapping
      {Pass::BackwardData, {2}, {2}, {2}, false},           // d = s: both taps on one phase
      {Pass::BackwardData, {2}, {4}, {2}, true},            // s / gcd(s, d) = 2
      {Pass::BackwardData, {2}, {4}, {3}, true},            // gcd 1 (K <= s / d would say no)
      {Pass::BackwardData, {3}, {4}, {2}, false},           // s / gcd(s, d) = 2 < 3
      {Pass::Forward, {1, 1}, {2, 2}, {1, 1}, true},        // 1x1: one tap per input
      {Pass::Forward, {2, 2}, {2, 2}, {1, 1}, false},       // each input under 4 taps
  };
  for (const Case& k : cases) {
    const std::string avx2 = plan(Isa::Avx2, k.pass, k.K, k.s, k.d);
    ASSERT_TRUE(has(avx2, " prefetch=") && !has(avx2, " prefetch=0 ")) << avx2;
    EXPECT_EQ(has(avx2, " prefetch_first=1"), has(avx2, " schedule=rows")) << avx2;
    EXPECT_EQ(has(avx2, " prefetch_run=1"), k.once) << avx2;
    const std::string avx512 = plan(Isa::Avx512, k.pass, k.K, k.s, k.d);
    EXPECT_FALSE(has(avx512, " prefetch_first=1") || has(avx512, " prefetch_run=1")) << avx512;
  }
}

}  // namespace
}  // namespace tct
