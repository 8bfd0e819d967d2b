#include "common/tokenizer/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pdserve {
namespace {

TEST(StopMatcherTest, MatchInsideOnePushCutsBeforeTheStop) {
  StopMatcher m({"STOP"});
  StopMatcher::Result r = m.Push("hello STOP world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "hello ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, MatchAcrossPushesHoldsThePrefixBack) {
  StopMatcher m({"</s>"});
  StopMatcher::Result r = m.Push("abc</");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "abc");
  r = m.Push("s");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "");
  r = m.Push(">tail");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");  // "abc" already went out; nothing before the stop remains
}

TEST(StopMatcherTest, TextBeforeStopInTheSamePushIsEmitted) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("x E").emit, "x ");
  StopMatcher::Result r = m.Push("NEND");
  // Held "E" + "NEND" = "ENEND": the stop starts at 2, so "EN" is emitted.
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "EN");
}

TEST(StopMatcherTest, MismatchReleasesTheHeldPrefix) {
  StopMatcher m({"stop"});
  StopMatcher::Result r = m.Push("a st");
  EXPECT_EQ(r.emit, "a ");
  EXPECT_FALSE(r.stopped);
  r = m.Push("ar");
  EXPECT_EQ(r.emit, "star");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, HoldsTheLongestSuffixThatIsAPrefix) {
  // Both "a" and "aa" end "xaa" and start "aaa": holding only "a" would
  // leak the first 'a' of a stop that may still complete.
  StopMatcher m({"aaa"});
  EXPECT_EQ(m.Push("xaa").emit, "x");
  EXPECT_EQ(m.Flush(), "aa");
  // A suffix that is not a prefix ("b" of "aab" vs "abc") is not held.
  StopMatcher n({"abc"});
  EXPECT_EQ(n.Push("aab").emit, "a");
  EXPECT_EQ(n.Flush(), "ab");
}

TEST(StopMatcherTest, FlushReturnsHeldTextAtEndWithoutStop) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.Push("result ##").emit, "result ");
  EXPECT_EQ(m.Flush(), "##");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, TwoStopsTheEarliestWins) {
  StopMatcher m({"world", "lo"});
  StopMatcher::Result r = m.Push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "hel");
}

TEST(StopMatcherTest, EarliestWinsRegardlessOfListOrder) {
  StopMatcher m({"lo", "hell"});
  StopMatcher::Result r = m.Push("say hello");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "say ");
}

TEST(StopMatcherTest, NoStopsIsPassThrough) {
  StopMatcher m({});
  StopMatcher::Result r = m.Push("anything </s> at all");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "anything </s> at all");
  EXPECT_EQ(m.Push("more").emit, "more");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "xy"});
  StopMatcher::Result r = m.Push("abc");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "abc");
  r = m.Push("axyz");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "a");
}

TEST(StopMatcherTest, PushesAfterAStopEmitNothing) {
  StopMatcher m({"."});
  EXPECT_TRUE(m.Push("one.two").stopped);
  StopMatcher::Result r = m.Push("three");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EmittedPlusFlushedEqualsInputWhenNothingStops) {
  StopMatcher m({"<|end|>", "\n\n"});
  const std::vector<std::string> pieces = {"a <", "|e", "nd", " b\n", "c<|", "end"};
  std::string out, in;
  for (const std::string& p : pieces) {
    in += p;
    StopMatcher::Result r = m.Push(p);
    ASSERT_FALSE(r.stopped);
    out += r.emit;
  }
  EXPECT_EQ(out, "a <|end b\nc");
  out += m.Flush();
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace pdserve
