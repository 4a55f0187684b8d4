"""simworld.eval: transition metrics, baselines, closed-loop replay and reports. Not built
yet: see the open issues."""
