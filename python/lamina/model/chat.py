"""The GGUF file's chat template, rendered for one user message.

The template is the file's own Jinja text (``tokenizer.chat_template``), rendered in a sandbox
with the variables HF's ``apply_chat_template`` passes (``messages``, ``add_generation_prompt``,
``bos_token``, ``eos_token``). A file without a template gets ChatML.
"""

from __future__ import annotations

from ..errors import InvalidInput

__all__ = ["CHATML", "render_user_message"]

#: The template used when the file has none (ChatML, as SmolLM2 and Qwen use).
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def render_user_message(
    template: str | None, content: str, *, bos_token: str = "", eos_token: str = "", add_generation_prompt: bool = True
) -> str:
    """The prompt text of one user message under ``template``.

    Parameters
    ----------
    template : str or None
        Jinja chat template (None: :data:`CHATML`).
    content : str
        The user's message.
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
        The template does not render (a Jinja error, named in the message).
    """
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        tpl = env.from_string(template if template is not None else CHATML)
        return str(
            tpl.render(
                messages=[{"role": "user", "content": content}],
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
            )
        )
    except TemplateError as e:
        raise InvalidInput(f"the model's chat template does not render: {e}") from e
