#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// conv_igemm.glsl with the mode a compile-time constant (CONVI_FWD).
#include "conv_codes.h"
#define CONVI_MODE CONVI_FWD
#include "conv_igemm.glsl"
