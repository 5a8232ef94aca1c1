"""Targets: the durable loops the harness can drive besides the reference (issue 11).

A target is started, resumed and told the human's decision through Python functions
(``module:function``) that the harness calls in a worker process (``worker``, which first
installs the kill points at its durability boundaries, ``boundaries``), handed a
``TargetContext`` (``context``). ``spec`` validates a scenario's ``[target]`` table,
``examples`` names the shipped ones, ``extras`` the optional extras they need, ``drive``
is what the story needs of a target, ``base`` the adapter protocol and ``python`` the
Python target. A LangGraph or DBOS app of its own is named by a graph or a workflow
(``apps``) and driven by the harness's adapters ``langgraph_app`` and ``dbos_app``, which
answer its own human-in-the-loop and record each ask (``human``).

It may import ``model`` only: ``plan`` and ``story`` import it, never the reverse.
"""
