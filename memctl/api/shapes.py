"""Every result shape the API returns, in one catalogue: what `memctl ... --json` prints and the MCP
tools return, each declared once where it is made (memctl/text/shape.py says how).

The MCP tools import their output schemas from here, scripts/gen_docs.py writes docs/api.md's
"Result shapes" from `SHAPES`, and tests/test_shapes.py checks each. Importing it imports search
and the rest, so the command line never does (its help names the keys, checked by the tests).
"""

from __future__ import annotations

from memctl.api import Answer, Found
from memctl.api.groups import (Activation, Confirmation, HealthScores, Lifecycle, PendingReview, Rejection, TopicLink,
                              TopicLog, TopicRow, TopicShown)
from memctl.cache import CacheStats, Cleared, RunResult
from memctl.cache.backend import Consolidated, Entry
from memctl.check import Problem
from memctl.context.turn import Context
from memctl.forget import Forgotten
from memctl.governance.governance import Chain
from memctl.governance.layers import LayerItem, Layered
from memctl.governance.lifecycle import Change
from memctl.hooks.protocol import Answer as HookAnswer, Setup as HookSetup
from memctl.index.index import UpdateReport
from memctl.ingest.ingest import Outcome
from memctl.overview import Shown, Status
from memctl.search.search import Result
from memctl.store.copy import Copied
from memctl.topics.daily import DailyReport
from memctl.topics.split import Assignment
from memctl.window.state import Plan, PlannedSection, RecordResult, State

# In the order docs/api.md gives them: by the part of memctl that returns them.
SHAPES = (Outcome, UpdateReport, Result, Found, Answer, Layered, LayerItem, Chain, Context, TopicRow, TopicShown, TopicLink,
          Activation, TopicLog, Assignment, PendingReview, Confirmation, Rejection, Lifecycle, Change, DailyReport,
          Problem, HealthScores, Plan, PlannedSection, RecordResult, State, Entry, RunResult, CacheStats, Cleared,
          Consolidated, Forgotten, Shown, Status, Copied, HookAnswer, HookSetup)

__all__ = [shape.__name__ for shape in SHAPES]
