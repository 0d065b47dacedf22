"""What every page's top bar shows: the user's teams and the one they work in, to switch between them."""

from adaptis_web.studio.accounts.selectors import team_list_for_user
from adaptis_web.studio.accounts.views import current_team


def teams(request) -> dict:
    if not request.user.is_authenticated:
        return {}
    return {"nav_teams": list(team_list_for_user(user=request.user)), "current_team": current_team(request)}
