"""A local fake of OpenAI's speech-to-text endpoint on 127.0.0.1, for the openai SDK.

Shaped like platform.openai.com/docs/api-reference/audio/createTranscription:

* ``POST /v1/audio/transcriptions``, ``Authorization: Bearer <key>``, a
  ``multipart/form-data`` body with ``file`` (the audio, named with its format's
  extension: flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm) and ``model``; answers
  ``{"text": ..., "usage": {"type": "duration", "seconds": N}}``.
* Errors: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status the
  API uses: a wrong key 401 ``invalid_api_key`` (the message echoes the key's start, as
  the real one does), an unknown model 400, a file over 25 MB 413, an unsupported
  extension 400.

It cannot hear: it answers ``text`` for every accepted file and keeps each upload in
``uploads`` so a test checks what was sent. ``fail_with`` queues statuses (e.g. 500,
429) answered before the next accepted request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

KEY = "sk-fake-transcription-key-0123456789abcdef"
MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
EXTENSIONS = ("flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "wav", "webm")
MAX_BYTES = 25 * 1024 * 1024


@dataclass
class Upload:
    filename: str
    content_type: str
    data: bytes
    model: str


@dataclass
class FakeOpenAIAudio:
    text: str = ""
    uploads: list[Upload] = field(default_factory=list)
    fail_with: list[int] = field(default_factory=list)
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> FakeOpenAIAudio:
        app = web.Application(client_max_size=MAX_BYTES + 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    @staticmethod
    def _error(status: int, message: str, type_: str, code: str | None,
               param: str | None = None) -> web.Response:
        return web.json_response({"error": {"message": message, "type": type_,
                                            "param": param, "code": code}}, status=status)

    async def _transcribe(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {KEY}":
            shown = auth.removeprefix("Bearer ")[:8]
            return self._error(401, f"Incorrect API key provided: {shown}****. You can find "
                               "your API key at https://platform.openai.com/account/api-keys.",
                               "invalid_request_error", "invalid_api_key")
        if self.fail_with:
            status = self.fail_with.pop(0)
            return self._error(status, "The server had an error while processing your "
                               "request.", "server_error" if status >= 500 else "requests",
                               None)
        form = await request.post()
        upload, model = form.get("file"), form.get("model")
        if not isinstance(upload, web.FileField):
            return self._error(400, "Missing file", "invalid_request_error", None, "file")
        if model not in MODELS:
            return self._error(400, f"Invalid model {model}.", "invalid_request_error",
                               "model_not_found", "model")
        data = upload.file.read()
        if len(data) > MAX_BYTES:
            return self._error(413, "Maximum content size limit exceeded.",
                               "invalid_request_error", None, "file")
        if upload.filename.rpartition(".")[2].lower() not in EXTENSIONS:
            return self._error(400, f"Invalid file format. Supported formats: "
                               f"{list(EXTENSIONS)}", "invalid_request_error", None, "file")
        self.uploads.append(Upload(upload.filename, upload.content_type, data, str(model)))
        return web.json_response({"text": self.text,
                                  "usage": {"type": "duration", "seconds": 1}})
