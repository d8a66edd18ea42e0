"""RQ jobs: the agent turn, consolidation, scheduled tasks.

Workers never import a platform SDK and never hold a channel token.
"""
