"""(filled in by later modules)"""
