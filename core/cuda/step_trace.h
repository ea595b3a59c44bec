// A trace of what the GPU ran during a few launches of a step's graph: each kernel, copy and
// memset with its start and end on the GPU's clock (CUPTI's activity records), and their summary
// (core/step_trace_summary.h), written as JSON. It shows what a graphed step's time is made of:
// each kernel as it runs in the graph, the idle time between nodes, and the host's work between
// launches (the gaps from one launch's last node to the next launch's first).
//
// Off unless PARALAB_STEP_TRACE names the JSON file to write. The graph launches of the process
// (a step's own graph, or one over a group) are counted; launches AFTER+1 .. AFTER+N are traced
// (PARALAB_STEP_TRACE_AFTER, default 50, past the warm-up; PARALAB_STEP_TRACE_LAUNCHES, default
// 4; numbered in the order their queueing begins), the traced launches' streams are waited for
// once the last of them is queued (TraceWindow, core/step_trace_summary.h), and the file
// written. CUPTI is loaded then, not linked: PARALAB_CUPTI_LIBRARY (a path), else
// libcupti.so.<CUDA major> by name (its directory in LD_LIBRARY_PATH); a build without CUPTI's
// headers, or a process that cannot load it, writes {"error": why} instead.
// The CUPTI library must be of the headers' CUDA minor release (its records are read in their
// layouts; cupti_version_mismatch), and not 13.0's first (it could deadlock disabling records).
// Launches may come from several threads; never the whole device is waited for (another thread
// may be capturing a graph on it).
// The traced launches are slower by CUPTI's cost per record: read the trace, not their times.
// A run with fewer graph launches than AFTER+N writes nothing.
#pragma once

#include <cstdint>
#include <string>

struct CUstream_st;  // cudaStream_t, without CUDA's headers for the plain code that includes this

namespace paralab::cuda {

// Around every graph launch, on the launching thread; `stream` is the one launched on.
void step_trace_before_launch();
void step_trace_after_launch(CUstream_st* stream);

// Why a CUPTI library of API version `loaded` (cuptiGetVersion) cannot be read with headers of
// version `built` (CUPTI_API_VERSION; both xxyyzz: CUDA major, minor, CUPTI update), or "".
std::string cupti_version_mismatch(uint32_t loaded, uint32_t built);

}  // namespace paralab::cuda
