# bash completion for tensorctl(1): commands, options, dtypes, files, op names
# and the names of the tensors and models stored in the daemon (asked with
# --json ls / --json model ls). tests/test_completion.sh checks the commands
# and each command's options against tensorctl's own help.
# Installed as bash-completion's completions/tensorctl; or: source this file.

# The file patterns (*.@(npy|safetensors)) need extglob, as bash-completion sets.
shopt -s extglob

# The ops of docs/ops.md (tests/test_completion.sh keeps this list true).
_tensorctl_ops="abs adam_m adam_param adam_v add arange argmax argmin avg_pool2d avg_pool2d_grad batch_norm binary_cross_entropy_with_logits cast clamp concat conv2d conv2d_grad_input conv2d_grad_weight copy cos cross_entropy div eq erf exp full gather ge gelu gt index_add index_select layer_norm le log log_softmax lt matmul max max_pool2d max_pool2d_grad maximum mean min minimum mse mul ne neg nll one_hot ones pad permute pow prod rand randn relu reshape rms_norm rsqrt sgd_buf sgd_param sigmoid silu sin slice softmax softplus sqrt stack std sub sum tanh transpose var where zeros"

_tensorctl_commands="ping info ls stat rm sync put get copy run graph train step help metrics chmod save load model evaluate predict kernel"
_tensorctl_modes="private group-read group-write world-read world-write"
_tensorctl_global_opts="--socket --json --help --version"

# Tensor names starting with $1 from the daemon; quietly nothing on failure.
_tensorctl_names()
{
	local bin=$1 cur=$2
	shift 2
	# Names are [A-Za-z0-9._:/-] only, so the JSON needs no real parser.
	"$bin" "$@" --json ls -- "$cur" 2>/dev/null |
		grep -o '"name":"[^"]*"' | sed 's/^"name":"//; s/"$//'
}

# Model names starting with $2 from the daemon; quietly nothing on failure.
_tensorctl_models()
{
	local bin=$1 cur=$2
	shift 2
	"$bin" "$@" --json model ls 2>/dev/null |
		grep -o '"name":"[^"]*"' | sed 's/^"name":"//; s/"$//'
}

# Device ids (what --device takes) from the daemon's info; quietly nothing on failure.
_tensorctl_devices()
{
	local bin=$1
	shift
	# Only the devices tensord uses have "id" (docs/protocol.md, info).
	"$bin" "$@" --json info 2>/dev/null | grep -o '"id":[0-9]*' | sed 's/^"id"://'
}

_tensorctl()
{
	local bin=${1:-tensorctl} cur= prev= line=${COMP_LINE:0:COMP_POINT}
	local cmd= sub= i w npos=0 n
	local -a sock=() words=()
	COMPREPLY=()

	# Words split at blanks only: COMP_WORDS splits tensor names at ':' too.
	read -ra words <<<"$line"
	[[ -z $line || $line == *[[:blank:]] ]] && words+=("")
	n=$((${#words[@]} - 1))
	cur=${words[n]}
	((n > 0)) && prev=${words[n - 1]}

	# The command, the positional arguments before the cursor, and --socket.
	for ((i = 1; i < n; i++)); do
		w=${words[i]}
		case $w in
		--socket)
			sock=(--socket "${words[i + 1]}")
			((i++)) ;;
		--socket=*) sock=("$w") ;;
		--file | -f | --values | --shape | --dtype | --out | -o | --attr | -a | \
			--interval | -n | --count | -c | --group | -g | --push | --groups | \
			--device | --devices | --model | --data | --batch-size | --epochs | --steps | \
			--prefix | --name | --input | --metric | --output)
			((i++)) ;;
		-) [[ -n $cmd ]] && ((npos++)) ;;   # chmod's "keep the mode"
		-*) ;;
		*)
			if [[ -z $cmd ]]; then
				cmd=$w
			else
				((npos == 0)) && sub=$w   # model/kernel's subcommand, help's topic
				((npos++))
			fi ;;
		esac
	done

	case $prev in
	--socket)
		compopt -o filenames 2>/dev/null
		COMPREPLY=($(compgen -f -- "$cur"))
		return ;;
	--file | -f | --out | -o)
		if [[ $cmd == run || $cmd == predict ]]; then
			COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur"))
		else
			compopt -o filenames 2>/dev/null
			COMPREPLY=($(compgen -f -X '!*.@(npy|safetensors)' -- "$cur") $(compgen -d -- "$cur"))
		fi
		;;
	--model)
		COMPREPLY=($(compgen -W "$(_tensorctl_models "$bin" "$cur" "${sock[@]}")" -- "$cur"))
		return ;;
	--dtype)
		COMPREPLY=($(compgen -W "f32 f16 bf16 i32 u8" -- "$cur"))
		return ;;
	--device)
		COMPREPLY=($(compgen -W "$(_tensorctl_devices "$bin" "${sock[@]}")" -- "$cur"))
		return ;;
	--devices | --data | --batch-size | --epochs | --steps | --prefix | --name | \
		--input | --metric | --output)
		return ;;
	--values | --shape | --attr | -a | --interval | -n | --count | -c | --group | -g | --push | --groups)
		return ;;
	esac

	if ((${#COMPREPLY[@]} == 0)); then
		if [[ -z $cmd ]]; then
			if [[ $cur == -* ]]; then
				COMPREPLY=($(compgen -W "$_tensorctl_global_opts" -- "$cur"))
			else
				COMPREPLY=($(compgen -W "$_tensorctl_commands" -- "$cur"))
			fi
			return
		fi
		if [[ $cur == -* ]]; then
			local opts=$_tensorctl_global_opts
			case $cmd in
			put) opts+=" --file --values --shape --dtype --device" ;;
			get) opts+=" --out --prefix" ;;
			stat | rm | load) opts+=" --prefix" ;;
			model) opts+=" --replace --tensors --name" ;;
			evaluate) opts+=" --data --metric --batch-size" ;;
			predict) opts+=" --input --output --out" ;;
			copy | cp) opts+=" --device" ;;
			run) opts+=" --out --attr --device" ;;
			train) opts+=" --model --data --batch-size --epochs --steps --devices" ;;
			info) opts+=" --watch --interval --count" ;;
			chmod) opts+=" --group" ;;
			kernel) opts+=" --groups --push" ;;
			esac
			COMPREPLY=($(compgen -W "$opts" -- "$cur"))
			return
		fi
		case $cmd in
		ls | put)
			((npos == 0)) &&
				COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur")) ;;
		stat | rm | get)
			COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur")) ;;
		help)
			if ((npos == 0)); then
				COMPREPLY=($(compgen -W "$_tensorctl_commands cp" -- "$cur"))
			elif ((npos == 1)) && [[ $sub == run ]]; then
				COMPREPLY=($(compgen -W "$_tensorctl_ops" -- "$cur"))
			fi ;;
		evaluate | predict)
			((npos == 0)) &&
				COMPREPLY=($(compgen -W "$(_tensorctl_models "$bin" "$cur" "${sock[@]}")" -- "$cur")) ;;
		model)
			if ((npos == 0)); then
				COMPREPLY=($(compgen -W "define ls stat rm save load" -- "$cur"))
			elif ((npos == 1)) && [[ $sub == stat || $sub == rm || $sub == save ]]; then
				COMPREPLY=($(compgen -W "$(_tensorctl_models "$bin" "$cur" "${sock[@]}")" -- "$cur"))
			elif [[ ($npos == 1 && $sub == load) || ($npos == 2 && $sub == save) ]]; then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.safetensors' -- "$cur") $(compgen -d -- "$cur"))
			elif ((npos == 2)) && [[ $sub == define ]]; then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur"))
			fi ;;
		load)
			if ((npos == 0)); then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.safetensors' -- "$cur") $(compgen -d -- "$cur"))
			fi ;;
		save)
			if ((npos == 1)); then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.safetensors' -- "$cur") $(compgen -d -- "$cur"))
			fi ;;
		copy | cp)
			((npos <= 1)) &&
				COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur")) ;;
		chmod)
			if ((npos == 0)); then
				COMPREPLY=($(compgen -W "$_tensorctl_modes -" -- "$cur"))
			elif ((npos == 1)); then
				COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur"))
			fi ;;
		run)
			if ((npos == 0)); then
				COMPREPLY=($(compgen -W "$_tensorctl_ops" -- "$cur"))
			else
				COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur"))
			fi ;;
		kernel)
			if ((npos == 0)); then
				COMPREPLY=($(compgen -W "create run ls rm" -- "$cur"))
			elif ((npos == 2)) && [[ $sub == create ]]; then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.@(comp|spv)' -- "$cur") $(compgen -d -- "$cur"))
			elif ((npos >= 2)) && [[ $sub == run ]]; then
				COMPREPLY=($(compgen -W "$(_tensorctl_names "$bin" "$cur" "${sock[@]}")" -- "$cur"))
			fi ;;
		graph | train | step)
			if ((npos == 0)); then
				compopt -o filenames 2>/dev/null
				COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur"))
			fi ;;
		esac
	fi

	# A ':' splits words for readline: offer only what follows the last one.
	if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
		local colon=${cur%"${cur##*:}"} k
		for k in "${!COMPREPLY[@]}"; do
			COMPREPLY[k]=${COMPREPLY[k]#"$colon"}
		done
	fi
}
complete -F _tensorctl tensorctl
