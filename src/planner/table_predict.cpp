#include "planner/table_predict.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace mlajit {

namespace {

// Points equal to a grid value up to rounding count as on it, so a measured cell is read back exactly.
constexpr double kEps = 1e-9;

struct Bracket {
    size_t i0, i1;
    double t;  // position between axis[i0] and axis[i1], 0..1
};

std::optional<Bracket> bracket(const std::vector<double>& axis, double v) {
    if (v < axis.front() - kEps || v > axis.back() + kEps) return std::nullopt;
    for (size_t k = 0; k < axis.size(); ++k)
        if (std::abs(axis[k] - v) <= kEps) return Bracket{k, k, 0};
    const size_t i = size_t(std::upper_bound(axis.begin(), axis.end(), v) - axis.begin()) - 1;
    return Bracket{i, i + 1, (v - axis[i]) / (axis[i + 1] - axis[i])};
}

void add_index(std::vector<double>& axis, double v) {
    if (std::none_of(axis.begin(), axis.end(), [&](double a) { return std::abs(a - v) <= kEps; })) axis.push_back(v);
}

size_t index_of(const std::vector<double>& axis, double v) {
    for (size_t k = 0; k < axis.size(); ++k)
        if (std::abs(axis[k] - v) <= kEps) return k;
    return axis.size();
}

PathTimes mix(std::initializer_list<std::pair<double, PathTimes>> terms) {
    PathTimes r{0, 0};
    for (const auto& [w, v] : terms) {
        r.mha_ms += w * v.mha_ms;
        r.mqa_ms += w * v.mqa_ms;
    }
    return r;
}

}  // namespace

TablePredictor::TablePredictor(const CalibrationTable& t, std::optional<CostModel> guide)
    : topk_(t.topk), guide_(std::move(guide)) {
    for (const auto& c : t.cells) {
        Grid& g = grids_[c.heads];
        add_index(g.xs, std::log(double(c.s_q)));
        add_index(g.ys, std::log(double(c.s_k)));
    }
    for (auto& [h, g] : grids_) {
        std::sort(g.xs.begin(), g.xs.end());
        std::sort(g.ys.begin(), g.ys.end());
    }
    for (auto& [h, g] : grids_) g.at.assign(g.xs.size() * g.ys.size(), PathTimes{std::nan(""), std::nan("")});
    for (const auto& c : t.cells) {
        Grid& g = grids_[c.heads];
        const PathTimes base = guide_ ? guide_->predict({c.s_q, c.s_k, c.heads, t.topk}) : PathTimes{1, 1};
        g.at[index_of(g.xs, std::log(double(c.s_q))) * g.ys.size() + index_of(g.ys, std::log(double(c.s_k)))] =
            PathTimes{std::log(c.mha_ms / base.mha_ms), std::log(c.mqa_ms / base.mqa_ms)};
    }
}

int TablePredictor::heads_used(int heads) const {
    int best = 0;
    double best_d = 0;
    for (const auto& [h, g] : grids_) {
        const double d = std::abs(std::log(double(h)) - std::log(double(heads)));
        if (best == 0 || d < best_d - kEps || (std::abs(d - best_d) <= kEps && h > best)) {
            best = h;
            best_d = d;
        }
    }
    return best;
}

std::optional<PathTimes> TablePredictor::predict(const AttnShape& s) const {
    if (s.topk != topk_ || grids_.empty()) return std::nullopt;
    const auto exact = grids_.find(s.heads);  // the usual case: a calibrated head count
    const Grid& g = exact != grids_.end() ? exact->second : grids_.at(heads_used(s.heads));
    const auto bx = bracket(g.xs, std::log(double(s.s_q)));
    const auto by = bracket(g.ys, std::log(double(s.s_k)));
    if (!bx || !by) return std::nullopt;

    auto cell = [&](size_t i, size_t j) { return g.cell(i, j); };
    std::optional<PathTimes> logt;
    const double tx = bx->t, ty = by->t;
    if (bx->i0 == bx->i1 || by->i0 == by->i1) {
        // On a grid line: linear between the two cells on it (one cell when on a grid point).
        const PathTimes* a = cell(bx->i0, by->i0);
        const PathTimes* b = cell(bx->i1, by->i1);
        const double t = bx->i0 == bx->i1 ? ty : tx;
        if (a && b) logt = mix({{1 - t, *a}, {t, *b}});
    } else {
        const std::array<const PathTimes*, 4> c = {cell(bx->i0, by->i0), cell(bx->i1, by->i0), cell(bx->i0, by->i1),
                                                   cell(bx->i1, by->i1)};
        const int present = int(std::count_if(c.begin(), c.end(), [](const PathTimes* p) { return p != nullptr; }));
        if (present == 4) {
            logt = mix({{(1 - tx) * (1 - ty), *c[0]}, {tx * (1 - ty), *c[1]}, {(1 - tx) * ty, *c[2]}, {tx * ty, *c[3]}});
        } else if (present == 3) {
            // Corners in unit-square coordinates, c[k] at (k & 1, k >> 1); barycentric weights of the point.
            std::array<int, 3> k{};
            int n = 0;
            for (int i = 0; i < 4; ++i)
                if (c[i]) k[n++] = i;
            auto ux = [](int i) { return double(i & 1); };
            auto uy = [](int i) { return double(i >> 1); };
            const double ax = ux(k[0]), ay = uy(k[0]);
            const double e1x = ux(k[1]) - ax, e1y = uy(k[1]) - ay, e2x = ux(k[2]) - ax, e2y = uy(k[2]) - ay;
            const double det = e1x * e2y - e2x * e1y;
            const double l1 = ((tx - ax) * e2y - e2x * (ty - ay)) / det;
            const double l2 = (e1x * (ty - ay) - (tx - ax) * e1y) / det;
            const double l0 = 1 - l1 - l2;
            if (l0 >= -kEps && l1 >= -kEps && l2 >= -kEps) logt = mix({{l0, *c[k[0]]}, {l1, *c[k[1]]}, {l2, *c[k[2]]}});
        }
    }
    if (!logt) return std::nullopt;
    const PathTimes base = guide_ ? guide_->predict(s) : PathTimes{1, 1};
    return PathTimes{base.mha_ms * std::exp(logt->mha_ms), base.mqa_ms * std::exp(logt->mqa_ms)};
}

}  // namespace mlajit
