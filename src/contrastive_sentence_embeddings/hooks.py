"""Project hooks."""

from __future__ import annotations

from pathlib import Path

from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.config import ParameterError, files_setting, offending_key, validate_parameters


class StrictParametersHook:
    """Parses every parameter block (``config.validate_parameters``) as soon as the
    configuration is loaded, before any node runs, and names the file(s) that set the
    offending key, so a typo fails at once instead of being ignored (or failing hours
    into a run)."""

    @hook_impl
    def after_context_created(self, context) -> None:
        try:
            validate_parameters(context.params)
        except ParameterError as error:
            conf_root = Path(context.project_path) / context.config_loader.conf_source
            environments = [context.config_loader.base_env, context.env or context.config_loader.default_run_env]
            key = offending_key(error)
            files = files_setting(key, [conf_root / env for env in environments if env]) if key else []
            where = f" (set in {', '.join(files)})" if files else (
                " (not in any parameters file: from --params?)" if key else "")
            named = str(error) if not key or key in str(error) else f"parameter {key}: {error}"
            raise ParameterError(f"{named}{where}", key=key) from None
