"""Advisors: what an operator or a scheduler could do next (:class:`detectors.vocabulary.Advice`).

Pure, like every detector: events and alert changes in, advice and explicit
state out. One advisor per module.
"""
