"""The GGUF file's chat template, rendered for a conversation or one user message.

The template is the file's own Jinja text (``tokenizer.chat_template``), rendered in a sandbox
with the variables HF's ``apply_chat_template`` passes (``messages``, ``add_generation_prompt``,
``bos_token``, ``eos_token``). A file without a template gets ChatML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidInput

__all__ = ["CHATML", "ROLES", "checked_messages", "render_messages", "render_user_message"]

#: The template used when the file has none (ChatML, as SmolLM2 and Qwen use).
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


#: The roles a rendered message may have.
ROLES = ("system", "user", "assistant")


def checked_messages(messages: object) -> list[dict[str, str]]:
    """``messages`` as plain ``{"role": r, "content": c}`` dicts, checked.

    Parameters
    ----------
    messages : object
        Expected: a non-empty list or tuple of mappings with ``role`` in :data:`ROLES` and a
        string ``content``; other keys are dropped.

    Returns
    -------
    list of dict

    Raises
    ------
    InvalidInput
        Not such a sequence, naming the first message that is wrong and why.
    """
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidInput("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    clean: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidInput(f"messages[{i}] must be a dict, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidInput(f"messages[{i}]['role'] must be one of {', '.join(ROLES)}; got {role!r}")
        if not isinstance(content, str):
            raise InvalidInput(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        clean.append({"role": role, "content": content})
    return clean


def render_messages(
    template: str | None,
    messages: Sequence[Mapping[str, str]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text of a conversation under ``template``.

    Parameters
    ----------
    template : str or None
        Jinja chat template (None: :data:`CHATML`).
    messages : sequence of mapping
        ``{"role": r, "content": c}`` with ``r`` in :data:`ROLES` and ``c`` a string, in order.
    bos_token, eos_token : str
        Token strings the template may refer to.
    add_generation_prompt : bool
        End with the opening of the assistant's turn.

    Returns
    -------
    str

    Raises
    ------
    InvalidInput
        No messages, a message that is not such a mapping, or a template that does not render
        (a Jinja error, named in the message).
    """
    clean = checked_messages(messages)
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        tpl = env.from_string(template if template is not None else CHATML)
        return str(
            tpl.render(
                messages=clean, add_generation_prompt=add_generation_prompt, bos_token=bos_token, eos_token=eos_token
            )
        )
    except TemplateError as e:
        raise InvalidInput(f"the model's chat template does not render: {e}") from e


def render_user_message(
    template: str | None, content: str, *, bos_token: str = "", eos_token: str = "", add_generation_prompt: bool = True
) -> str:
    """The prompt text of one user message under ``template``: :func:`render_messages` of
    ``[{"role": "user", "content": content}]``, with the same ``template``, ``bos_token``,
    ``eos_token`` and ``add_generation_prompt``, returning the same text and raising the same
    :class:`InvalidInput` where the template does not render.
    """
    return render_messages(
        template,
        [{"role": "user", "content": content}],
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
    )
