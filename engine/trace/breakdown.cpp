#include "engine/trace/breakdown.h"

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::trace {

const char* timeline_source_name(TimelineSource s) {
  switch (s) {
    case TimelineSource::host:
      return "host";
    case TimelineSource::cuda_events:
      return "cuda-events";
    case TimelineSource::cupti:
      return "cupti";
  }
  return "?";
}

TimelineSource parse_timeline_source(std::string_view name) {
  if (name == "host") return TimelineSource::host;
  if (name == "cuda-events") return TimelineSource::cuda_events;
  if (name == "cupti") return TimelineSource::cupti;
  DPB_FAIL() << "timeline source '" << escape_untrusted(name) << "' is not one of host, cuda-events, cupti";
}

}  // namespace dpb::trace
