#include "worker/data/tiny_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "worker/data/bpe_trainer.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace data {
namespace {

// Plain English around describing pictures, so that the tokenizer knows common words beyond the
// shapes vocabulary.
const char* const kEnglish[] = {
    "The quick brown fox jumps over the lazy dog.",
    "A picture is worth a thousand words, but a caption helps.",
    "This image shows a small object on a plain background.",
    "There is one shape in the picture, and it has a single colour.",
    "What colour is the shape? It is red, green, blue, yellow, purple or orange.",
    "Where is it? It may be near the top, the bottom, the left or the right side.",
    "The circle is round, the square has four equal sides, and the triangle has three.",
    "Please describe the scene in one short sentence.",
    "I can see a bright object in the middle of a white image.",
    "Is there anything else in the image? No, there is nothing else.",
    "How many shapes are there? There is only one shape.",
    "The model looks at the image and answers the question.",
    "We train a small vision language model on synthetic data.",
    "Each sample has an image, a question from the user, and an answer from the assistant.",
    "The answer should be short, clear and correct.",
    "Count the objects: one, two, three, four, five, six, seven, eight, nine, ten.",
    "Numbers such as 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 28, 56, 112, 224 and 448 appear too.",
    "The image is 112 pixels wide and 112 pixels high.",
    "Left, right, top, bottom, center, corner, middle, side, edge, above, below.",
    "Colours: red, green, blue, yellow, purple, orange, black, white, gray, pink, brown.",
    "Shapes: circle, square, triangle, rectangle, star, line, dot, ring, box.",
    "Can you tell me what is in this photo? Sure, I would be happy to help.",
    "Thank you for the question. Here is a description of the image.",
    "The shape is located in the upper part of the picture.",
    "It was a sunny day, and the children were playing in the park.",
    "She said that the book on the table was hers, but he didn't believe her.",
    "They're going to the market because they've run out of bread and milk.",
    "We'll meet at the station at 9 o'clock; don't be late!",
    "Learning takes time: read, write, think, and ask questions.",
    "The weather today is cold and windy, with some rain in the afternoon.",
    "He opened the window, looked outside, and saw a large red bird on a tree.",
    "Our team will review the results and share a report next week.",
    "Training loss goes down as the model learns the captions.",
    "An apple, a banana, an orange and a bowl of grapes are on the kitchen table.",
    "The cat sat on the mat while the dog slept near the door.",
    "You are a helpful assistant. Answer the user's questions about images.",
    "Describe the image in detail, including colours, shapes and positions.",
    "The object appears on the left side of the image, close to the center.",
    "Is the triangle above or below the circle? It is above the circle.",
    "The square is larger than the circle but smaller than the rectangle.",
    "Mountains rise beyond the valley where farmers harvest wheat every autumn.",
    "The museum displays ancient paintings, sculptures and handwritten manuscripts.",
    "Scientists measured the temperature, pressure and humidity throughout the experiment.",
    "Engineers designed a bridge strong enough to survive earthquakes and storms.",
    "My grandmother keeps vegetables, herbs and flowers in her garden behind the house.",
    "Musicians practiced together for hours before the evening concert began.",
    "The library opens early on Monday, Wednesday and Friday mornings.",
    "Travelers crossed the desert carrying water, blankets and a compass.",
    "Doctors recommend exercise, healthy food and plenty of sleep.",
    "The computer processes millions of instructions every second.",
    "Students wrote essays about history, geography, mathematics and literature.",
    "A gentle breeze moved the leaves while birds sang in the distance.",
    "Fishermen returned to the harbor with baskets full of silver fish.",
    "The restaurant serves soup, salad, pasta, pizza, chicken and chocolate cake.",
    "Our journey continued through forests, rivers, villages and quiet countryside.",
    "Photographers prefer soft light during sunrise and sunset.",
    "Volunteers cleaned the beach and collected plastic bottles and bags.",
    "The government announced new policies for education and transportation.",
    "Children built a snowman with a carrot nose and two black buttons.",
    "Astronomers observed planets, comets and distant galaxies through telescopes.",
    "Why is the sky blue? Sunlight scatters in the atmosphere.",
    "Patterns, textures and reflections make photographs interesting.",
    "Quickly summarize the document, then list three important points.",
    "Furniture: chair, table, sofa, bed, shelf, lamp, cupboard, mirror.",
    "Animals: elephant, giraffe, monkey, tiger, rabbit, horse, sheep, zebra.",
    "Vehicles: bicycle, motorcycle, truck, airplane, helicopter, submarine, train.",
    "Weather words: sunny, cloudy, foggy, rainy, snowy, thunder, lightning.",
    "Emotions include happiness, sadness, surprise, anger, fear and curiosity.",
};

}  // namespace

std::vector<AddedToken> QwenSpecialTokens(int64_t first_id) {
  const char* const names[] = {"<|endoftext|>",  "<|im_start|>", "<|im_end|>",
                               "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                               "<|video_pad|>"};
  std::vector<AddedToken> out;
  for (const char* n : names) out.push_back({first_id++, n, /*special=*/true});
  return out;
}

std::vector<std::string> TinyTokenizerCorpus() {
  std::vector<std::string> corpus;
  // The chat template's text around the special tokens, once per caption so that its words
  // weigh like the captions'.
  const std::vector<std::string> captions = AllShapeCaptions();
  const std::vector<std::string>& questions = ShapeQuestions();
  for (size_t i = 0; i < captions.size(); ++i) {
    corpus.push_back("system\nYou are a helpful assistant.");
    corpus.push_back("user\n");
    corpus.push_back(absl::StrCat("\n", questions[i % questions.size()]));
    corpus.push_back(absl::StrCat("assistant\n", captions[i]));
    corpus.push_back("\n");
  }
  for (const char* s : kEnglish) corpus.push_back(s);
  return corpus;
}

absl::StatusOr<std::string> TrainTinyTokenizerJson(const std::vector<std::string>& extra_texts,
                                                   int64_t vocab_size) {
  std::vector<std::string> corpus = TinyTokenizerCorpus();
  corpus.insert(corpus.end(), extra_texts.begin(), extra_texts.end());
  BpeTrainerOptions options;
  options.vocab_size = vocab_size;
  options.min_frequency = 1;  // a small corpus: let rare words merge too, to fill the vocabulary
  absl::StatusOr<BpeModel> model = TrainBpe(corpus, options);
  if (!model.ok()) return model.status();
  // The special tokens sit at vocab_size whether or not the corpus filled the vocabulary.
  return BpeModelToTokenizerJson(*model, QwenSpecialTokens(vocab_size));
}

}  // namespace data
}  // namespace dhp
