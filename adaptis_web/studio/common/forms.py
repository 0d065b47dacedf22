"""What every page form shares: a SpecError shown on the form field it names."""

from __future__ import annotations

from planner.errors import SpecError


class SpecErrorFormMixin:
    """Put a SpecError on the form field its dotted path starts with: ``file.layers[2].mlp`` goes on
    ``file`` as "layers[2].mlp: <reason>"; a path that names no form field becomes a form-wide error."""

    # Request fields the form shows under another name (in other units).
    field_aliases: dict[str, str] = {}

    def spec_error_message(self, error: SpecError) -> tuple[str | None, str]:
        root = error.field.split(".", 1)[0].split("[", 1)[0]
        inner = error.field[len(root):].lstrip(".")
        root = self.field_aliases.get(root, root)
        if root not in self.fields:
            return None, str(error)
        return root, f"{inner}: {error.reason}" if inner else error.reason

    def add_spec_error(self, error: SpecError) -> None:
        self.add_error(*self.spec_error_message(error))
