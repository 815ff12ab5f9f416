// Package agentfile builds helix agents from a YAML file, so that agents
// can be tried and served (`helix-dbos serve --agents FILE`) without
// writing Go. The file declares each agent's model, instructions, limits,
// structured output, client-executed tools, approval-gated stand-in
// tools, sub-agents and companions.
//
//	agents, err := agentfile.Load("agents.yaml", nil)
//	if err != nil { ... }          // *agentfile.Error: file:line: agent "x": field: what is wrong
//	eng.Register(agents.All...)
//
// # File format
//
//	agents:
//	  - name: assistant                 # required; the agent type ([a-zA-Z0-9_-], up to 54)
//	    description: Answers questions  # shown to a parent when it is a sub-agent
//	    systemPrompt: |                 # the system message
//	      You are a helpful assistant.
//	    maxSteps: 8                     # steps per turn (default 10)
//	    model:                          # required
//	      provider: openai              # openai | anthropic | scripted
//	      model: gpt-4o-mini            # required for openai and anthropic
//	      baseURL: http://localhost:11434/v1   # optional: an OpenAI-compatible server
//	      apiKeyEnv: OPENAI_API_KEY     # the variable holding the key (see below)
//	      headers: {HTTP-Referer: https://example.org}
//	      maxRetries: 3                 # 0: no retries; absent: the provider's default
//	      temperature: 0.2              # helix.LLMConfig
//	      maxOutputTokens: 1024         # helix.LLMConfig
//	      providerOptions:              # request options of the provider (a JSON object in YAML)
//	        reasoning_effort: low       # set on the request body as they are
//	      # anthropic only: maxTokens (default 4096), thinking (budget tokens; 0 = off)
//	      # scripted only: script: scripts/assistant.yaml (relative to this file)
//	    outputSchema:                   # optional: a JSON Schema (in YAML) of a JSON object;
//	      type: object                  # the agent then ends by delivering it (__finish__)
//	      properties: {answer: {type: string}}
//	      required: [answer]
//	    initialState: {notes: []}       # optional: the custom state of new sessions
//	    clientTools:                    # executed by the client: the run waits for the result
//	      - name: ask_user
//	        description: Ask the user a question
//	        inputSchema: {type: object, properties: {question: {type: string}}, required: [question]}
//	        outputSchema: {type: object, properties: {answer: {type: string}}, required: [answer]}
//	        timeout: 24h                # optional: after it, the model reads a timeout error
//	    approvalTools:                  # stand-ins gated on approval (see below)
//	      - name: publish
//	        description: Publish the article
//	        inputSchema: {type: object, properties: {title: {type: string}}}
//	        result: {published: true}   # what an approved call returns
//	    subAgents:                      # other agents of this file, each a tool subagent__<name>
//	      - researcher                  # or {name: researcher, description: ..., inputSchema: {...}}
//	    persistentAgents:               # companions, spawned and consulted again (companion__ tools)
//	      - {name: editor, mode: blocking}   # or just editor; mode blocking (default) or non-blocking
//	    mcp:                            # MCP servers whose tools the agent takes (package mcp)
//	      - name: files                 # its tools are offered as files__<tool>
//	        command: mcp-files          # stdio: command, args, env, dir
//	        args: [--root, /srv]
//	        approvalFor: [write_*]      # tools (server-side names) that wait for an approval
//	      - name: tracker
//	        url: https://tracker.example/mcp   # streamable HTTP: url, headers, bearerTokenEnv
//	        bearerTokenEnv: TRACKER_TOKEN
//	        requireApproval: true       # every tool waits for an approval
//
// Unknown keys are rejected (with a suggestion for a misspelt one), as are
// values of the wrong type, invalid names and schemas, duplicate agent or
// tool names, sub-agents and companions that are not agents of the file or
// have no outputSchema, delegation cycles (an agent reaching itself
// through subAgents or persistentAgents), providerOptions that are not a
// mapping or set what the adapter owns (stream, messages), and an
// anthropic thinking budget below anthropic.MinThinkingBudget or not below
// maxOutputTokens and maxTokens (the default 4096 when neither is set).
// Every error is an [*Error] naming the file, the line, the agent and the
// field.
//
// # Provider options
//
// providerOptions is passed as helix.LLMConfig.ProviderOptions under the
// adapter's key ([ProviderOptionsKey]: "openai", "anthropic", or the name
// of a provider of Options.Providers). The openai and anthropic adapters
// set its members on the request body as they are (a null member removes
// a field the adapter sets): reasoning_effort, response_format, top_p,
// seed or max_completion_tokens for openai; top_k, metadata or
// service_tier for anthropic.
//
// # API keys
//
// Keys are never written in the file: apiKeyEnv names the environment
// variable that holds one (an apiKey key is rejected). Without apiKeyEnv,
// openai reads OPENAI_API_KEY and anthropic ANTHROPIC_API_KEY, for the
// provider's own endpoint only: with a baseURL and no apiKeyEnv no key is
// sent (a local server may need none, and a provider's key must not go to
// a server it does not run unless the file says so). A variable that is
// named but not set is an error naming it.
//
// # The scripted provider
//
// provider: scripted plays a script file (package llm/scripted: steps
// shared by every agent, or agents keyed by agent type) instead of calling
// an LLM, so every feature can be tried and tested without an API key. A
// script file named by several agents is loaded once; a keyed script must
// script every agent that uses it (sub-agents included).
//
// # Approval tools
//
// A YAML file has no code, so it cannot declare a tool that does
// something. approvalTools declares a stand-in: each call waits for an
// approval decision (`helix-dbos approve|deny`, or the server's
// submit-tool-result route); a denied call never runs and the model reads
// that it was not approved; an approved call returns result (default
// {"ok":true,"input":<the call's arguments>}) and does nothing else. That
// is enough to try and test approval flows end to end. Tools with real
// effects are written in Go (helix.NewTool with helix.RequireApproval):
// see examples/embed.
package agentfile
