"""What the serving tests share: a chat template with tools for the demo tokenizer, and a tool call."""

TOOL_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}System: tools{% for t in tools %} {{ t['function']['name'] }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% elif m['role'] == 'tool' %}Tool: {{ m['content'] }}\n"
    "{% else %}Assistant:\n{{ m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}</tool_call>"
    "{% endfor %}{{ eos_token }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:\n{% endif %}"
)
"""The demo template plus Hermes-style tools: the tool names in a system line, assistant tool calls as
`<tool_call>{json}</tool_call>`, tool results as `Tool:` lines."""

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
