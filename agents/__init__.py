"""Agents: the ParallelSearch protocol, policies (text generation backends), searchers and resolvers."""
