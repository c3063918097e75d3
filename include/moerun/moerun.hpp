// moerun/moerun.hpp — everything public.
#pragma once

#include "moerun/backend.hpp"
#include "moerun/dtype.hpp"
#include "moerun/error.hpp"
#include "moerun/formats.hpp"
#include "moerun/hf.hpp"
#include "moerun/layer.hpp"
#include "moerun/oracle.hpp"
#include "moerun/platform.hpp"
#include "moerun/presets.hpp"
#include "moerun/registry.hpp"
#include "moerun/safetensors.hpp"
#include "moerun/spec.hpp"
#include "moerun/tensor.hpp"
#include "moerun/verify.hpp"
#include "moerun/weights.hpp"
