"""The compiler's intermediate representation: tracing, the Graph, its interpreters and passes."""

from .graph import Graph, IndexRef, Node, Value, format_graph
from .interpreter import interpret, replay
from .simplify import cse, dce, elementwise_regions, fold_constants, simplify
from .tracer import TraceError, trace

__all__ = ["Graph", "IndexRef", "Node", "TraceError", "Value", "cse", "dce", "elementwise_regions",
           "fold_constants", "format_graph", "interpret", "replay", "simplify", "trace"]
