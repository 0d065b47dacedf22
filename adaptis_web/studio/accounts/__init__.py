"""Accounts and teams: who belongs to which team in which role (roles), the team writes (teams), API tokens
(tokens); their pages, endpoints, forms, serializers and reads (selectors)."""
