#version 450
#extension GL_GOOGLE_include_directive : require
// The multi-tensor optimizer with up to OPTM_SLOTS memory windows: optim_multi.glsl.
#include "optim_multi.glsl"
