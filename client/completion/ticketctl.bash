# Bash completion for ticketctl, the command-line client of Ticketing.
#
# Load it in a shell with
#     source client/completion/ticketctl.bash
# or install it as /usr/share/bash-completion/completions/ticketctl.
# It completes the commands, the flags, file names after the flags that
# take a file (--secret-file, --peer-secret-file, --tls-ca, --tls-cert,
# --tls-key, also as --flag=FILE), a command name after `run KEY --`, the
# subcommands of `ring` and a file name after `ring apply`.
# It needs bash alone (not the bash-completion package).

_ticketctl()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev="" flag="" w cmd="" key="" file="" i
    local commands="run acquire release query ping status members remove-member ring"
    local flags="--addr --secret-file --peer-secret-file --peers --owner --tls-ca --tls-cert --tls-key
        --tls-server-name --lease --wait --timeout --grace --token --count --admin-port --group
        --json -v --verbose --version --help"
    local with_file="--secret-file --peer-secret-file --tls-ca --tls-cert --tls-key"
    local with_value="$with_file --addr --peers --owner --tls-server-name --lease --wait --timeout --grace
        --token --count --admin-port --group"
    COMPREPLY=()
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}

    # The flag whose value is being typed: "--flag VALUE", or "--flag=VALUE"
    # (which bash splits at the '=' when COMP_WORDBREAKS holds it).
    local joined=""
    if [[ $cur == --*=* ]]; then
        flag=${cur%%=*}
        cur=${cur#*=}
        joined="$flag="
    elif [[ $prev == "=" && $COMP_CWORD -ge 2 ]]; then
        flag=${COMP_WORDS[COMP_CWORD - 2]}
    elif [[ $cur == "=" && $prev == --* ]]; then
        flag=$prev
        cur=""
    elif [[ " ${with_value//$'\n'/ } " == *" $prev "* ]]; then
        flag=$prev
    fi
    if [[ -n $flag ]]; then
        if [[ " ${with_file//$'\n'/ } " == *" $flag "* ]]; then
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            [[ -n $joined ]] && COMPREPLY=("${COMPREPLY[@]/#/$joined}")
        fi
        return 0
    fi

    # The command and its first argument so far; after `run KEY [--]`, the
    # command line of the command that run starts.
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        if [[ $cmd == run && -n $key && ($w == "--" || $w != -*) ]]; then
            local first=$((i + 1))
            [[ $w != "--" ]] && first=$i
            if ((COMP_CWORD == first)); then
                mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
            else
                compopt -o filenames 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            fi
            return 0
        fi
        case $w in
            --*=*) ;;
            -*)
                [[ " ${with_value//$'\n'/ } " == *" $w "* ]] && ((i++))
                ;;
            *)
                if [[ -z $cmd ]]; then
                    cmd=$w
                elif [[ -z $key ]]; then
                    key=$w
                elif [[ -z $file ]]; then
                    file=$w
                fi
                ;;
        esac
    done

    if [[ $cmd == run && -n $key && $cur != -* ]]; then
        mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
    elif [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
    elif [[ -z $cmd ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur")
    elif [[ $cmd == ring && -z $key ]]; then
        mapfile -t COMPREPLY < <(compgen -W "show apply" -- "$cur")
    elif [[ $cmd == ring && $key == apply && -z $file ]]; then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
}

complete -F _ticketctl ticketctl
