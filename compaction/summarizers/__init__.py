"""Summarizers: the offline extractive default and an OpenAI-compatible HTTP summarizer."""

from .base import Summarizer, SummaryResult
from .extractive import ExtractiveSummarizer
from .openai_http import OpenAIChatSummarizer as OpenAIChatSummarizer

__all__ = ["Summarizer", "SummaryResult", "ExtractiveSummarizer"]
