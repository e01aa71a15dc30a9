# bench/stats.awk - median and range over rounds, for bench/run*.sh.
# Input lines: KEY... VALUE (the key is every field but the last).
# Output, one line per key in first-seen order: KEY... MEDIAN MIN MAX N.
# (POSIX awk: mawk has no asort, so each key's values are sorted here.)
{
    k = $1
    for (i = 2; i < NF; i++) k = k " " $i
    if (!(k in n)) order[++keys] = k
    v[k, ++n[k]] = $NF + 0
}
END {
    for (j = 1; j <= keys; j++) {
        k = order[j]
        m = n[k]
        for (a = 1; a <= m; a++) s[a] = v[k, a]
        for (a = 2; a <= m; a++) {
            x = s[a]
            for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]
            s[b + 1] = x
        }
        med = m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
        print k, med, s[1], s[m], m
    }
}
