"""A knowledge base behind the retriever interfaces of LangChain and LlamaIndex.

Each framework has its own module, imported only by those who use it (the frameworks are
optional extras: ``loom-replay[langchain]``, ``loom-replay[llamaindex]``):

* :mod:`loom_knowledge.bridges.langchain`: a ``BaseRetriever``, ``Document`` <-> ``Doc``
  converters, and a LangChain text splitter as a loom :class:`~loom_knowledge.Chunker`.
* :mod:`loom_knowledge.bridges.llamaindex`: the same for LlamaIndex (``BaseRetriever``,
  ``Document`` / ``TextNode``, a node parser as a ``Chunker``).

Inside a flow every retrieval is recorded through the flow's ``ctx.decide`` (ADR 0041), so a
chain or query engine replays with the corpus deleted; outside a flow it is a plain search.
"""

from __future__ import annotations

__all__: list[str] = []
