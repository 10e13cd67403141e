// pair_style mlip's keyword table (pair_style/pair_mlip_keywords.h): the parser, its errors, and
// the docs made from the table (docs/pair_style.md's synopsis and table, README's synopsis).
#include "pair_mlip_keywords.h"

#include "mlip/error.h"
#include "support/source_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

mlip_pair::Options parse(std::vector<std::string> words, std::size_t n_models = 1)
{
  std::vector<char *> argv;
  for (auto &w : words) argv.push_back(w.data());
  return mlip_pair::parse_keywords(static_cast<int>(argv.size()), argv.data(), n_models);
}

std::string error_of(std::vector<std::string> words, std::size_t n_models = 1)
{
  try {
    parse(std::move(words), n_models);
  } catch (const mlip::Error &e) {
    return e.what();
  }
  return "no error";
}

std::string read(const std::string &relative)
{
  std::ifstream in(mlip::testing::source_dir() + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}    // namespace

TEST(PairKeywords, DefaultsAndValues)
{
  const mlip_pair::Options none = parse({});
  EXPECT_EQ(none.chunk, 0);
  EXPECT_FALSE(none.timing);
  EXPECT_EQ(none.device, "");
  EXPECT_EQ(none.exchange, mlip_pair::Options::Exchange::automatic);
  EXPECT_EQ(none.out_freq, 0);
  EXPECT_FALSE(none.deterministic);
  EXPECT_EQ(parse({}, 3).out_freq, 100);    // a committee reports every 100 steps unless told
  const mlip_pair::Options o = parse({"chunk", "256", "timing", "yes", "device", "cuda:1", "cuda_graph", "yes",
                                      "deterministic", "yes", "exchange", "no", "out_freq", "10", "out_file", "d.out", "relative", "0.5"},
                                     2);
  EXPECT_EQ(o.chunk, 256);
  EXPECT_TRUE(o.timing);
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_TRUE(o.cuda_graph);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(o.exchange, mlip_pair::Options::Exchange::no);
  EXPECT_EQ(o.out_freq, 10);
  EXPECT_EQ(o.out_file, "d.out");
  EXPECT_DOUBLE_EQ(o.relative, 0.5);
}

TEST(PairKeywords, ErrorsNameTheKeywordAndTheValue)
{
  EXPECT_NE(error_of({"chunks", "5"}).find("unknown keyword 'chunks' (known: chunk, head, timing, device, cuda_graph, "
                                           "graph, deterministic, exchange, out_freq, out_file, relative)"),
            std::string::npos);
  EXPECT_NE(error_of({"chunk"}).find("keyword 'chunk' needs a value (N)"), std::string::npos);
  for (const char *bad : {"0", "-3", "1.5", "ten", "", "99999999999"})
    EXPECT_NE(error_of({"chunk", bad}).find("keyword 'chunk' must be a whole number >= 1, not '" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of({"timing", "maybe"}).find("keyword 'timing' must be 'yes', 'no' or 'kernels', not 'maybe'"), std::string::npos);
  for (const char *bad : {"0", "-1", "inf", "nan", "1e999", "x"})
    EXPECT_NE(error_of({"relative", bad}, 2).find("keyword 'relative' must be a finite number > 0, not '" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  // A keyword given twice: the last value counts.
  EXPECT_EQ(parse({"chunk", "8", "chunk", "16"}).chunk, 16);
  EXPECT_NE(error_of({"out_freq", "10"}).find("'out_freq' reports the deviation of a committee: give two or more "
                                              "model files"),
            std::string::npos);
}

TEST(PairKeywords, SynopsisListsEveryKeyword)
{
  EXPECT_EQ(mlip_pair::synopsis(),
            "pair_style mlip MODEL [MODEL2 ...] [chunk N] [head NAME] [timing yes|no|kernels] [device cpu|cuda|cuda:N|auto] "
            "[cuda_graph yes|no|eager] [graph host|device] [deterministic yes|no] [exchange yes|no] [out_freq N] [out_file FILE] [relative EPS]");
}

// docs/pair_style.md shows the synopsis and the table between markers, exactly as the table
// makes them; README.md shows the synopsis. Fix a failure by copying the expected text in.
TEST(PairKeywords, DocsShowTheTable)
{
  const std::string doc = read("docs/pair_style.md");
  const std::string begin = "<!-- keywords: made from pair_style/pair_mlip_keywords.cpp -->\n";
  const std::string end = "<!-- end keywords -->\n";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/pair_style.md has no line " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/pair_style.md has no line " << end;
  const std::string expected = "\n    " + mlip_pair::synopsis() + "\n\n" + mlip_pair::markdown_table() + "\n";
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), expected);
  EXPECT_NE(read("README.md").find("    " + mlip_pair::synopsis() + "\n"), std::string::npos)
      << "README.md should show the synopsis:\n    " << mlip_pair::synopsis();
}
