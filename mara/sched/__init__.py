"""The scheduler interface every engine drives (``interface.py``) and the steps rules share (``sizing.py``)."""
