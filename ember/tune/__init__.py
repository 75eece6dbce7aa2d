"""Auto-tuning: schedules found by search over a design space generated from the computation,
guided by a learned cost model and real measurements, kept in a tuning database."""

from .cost_model import RandomCostModel, XGBCostModel, rank_correlation
from .database import Database, TunedSchedules, TuningRecord
from .extract import extract_tasks
from .features import FEATURE_LENGTH, extract_features
from .gpu_measure import GPURunner
from .measure import LocalRunner, MeasureInput, MeasureResult
from .ray_runner import RayRunner
from .task import Task, task_from_tensors
from .tune_model import ModelTuneReport, tune_model
from .tuner import TuneResult, tune

__all__ = ["Database", "FEATURE_LENGTH", "GPURunner", "LocalRunner", "MeasureInput", "MeasureResult", "RandomCostModel",
           "ModelTuneReport", "RayRunner", "Task", "TunedSchedules", "TuneResult", "TuningRecord", "XGBCostModel",
           "extract_features", "extract_tasks", "rank_correlation", "task_from_tensors", "tune",
           "tune_model"]
