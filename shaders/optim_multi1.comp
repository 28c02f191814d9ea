#version 450
#extension GL_GOOGLE_include_directive : require
// The multi-tensor optimizer with every tensor in one memory window: optim_multi.glsl.
#define OPTM_ONE_WINDOW 1
#include "optim_multi.glsl"
