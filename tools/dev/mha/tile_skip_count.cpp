// Count, for the benchmark's top-k mask generator (uniform distinct keys over each row's causal prefix,
// tests/reference causal_topk_indices), how many 128x128 tiles of the causal band hold no bit.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <numeric>
int main(int argc, char** argv) {
    const int S = atoi(argv[1]), topk = 2048, B = 128, nb = (S + B - 1) / B;
    std::mt19937_64 rng(12345);
    std::vector<char> hit((size_t)nb * nb, 0);
    std::vector<int> cand(S);
    double att = 0, causal = 0;
    for (int i = 0; i < S; ++i) {
        const int n = i + 1, m = std::min(topk, n);
        std::iota(cand.begin(), cand.begin() + n, 0);
        for (int j = 0; j < m; ++j) {
            std::uniform_int_distribution<int> d(j, n - 1);
            std::swap(cand[j], cand[d(rng)]);
            hit[(size_t)(i / B) * nb + cand[j] / B] = 1;
        }
        att += m; causal += n;
    }
    long band = 0, any = 0;
    for (int b = 0; b < nb; ++b)
        for (int t = 0; t <= b; ++t) { ++band; any += hit[(size_t)b * nb + t]; }
    printf("S=%d: causal-band tiles %ld, with a bit %ld, empty (skippable) %ld = %.3f%%; attended/causal pairs %.3f\n",
           S, band, any, band - any, 100.0 * (band - any) / band, att / causal);
}
